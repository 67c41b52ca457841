"""The cost table waits for no answer: until this machine's is measured the engine drafts by the shipped default, and
it is measured in the llama.cpp thread's idle time, a call at a time, against the real llama.cpp and SmolLM2."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from minions.backends.llamacpp import backend as backend_module
from minions.backends.llamacpp import cost_table
from minions.backends.llamacpp import engine as engine_module
from minions.backends.llamacpp.backend import LlamaCppBackend
from minions.backends.llamacpp.cost_table import DEFAULT_COST_TABLE, load_cost_table
from minions.backends.llamacpp.engine import Engine, EngineConfig
from minions.backends.llamacpp.quantize import default_local_model
from minions.backends.speculation import CostTable
from minions.types import ChatRequest, Message, SamplingParams

pytestmark = pytest.mark.slow

CONFIG = EngineConfig(max_seqs=1, n_ctx=2048, seq_ctx=2048, kv_cache=False, learn_drafts=False)
"""One sequence: the table has one curve, measured in a few seconds."""
REQUEST = ChatRequest(
    [Message("user", "Repeat after me: one two three four five six seven eight nine ten.")],
    SamplingParams(max_tokens=24),
)


@pytest.fixture
def model_path() -> Path:
    return default_local_model()  # from the suite's cache, converted once


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache dir with no cost table in it, as after a fresh set-up."""
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path))
    return tmp_path


def no_measuring(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the cost table was measured before the answer")


def test_a_fresh_machine_answers_by_the_default_table_and_measures_nothing(
    model_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cost_table, "measure_cost_table", no_measuring)
    monkeypatch.setattr(engine_module, "load_or_measure_cost_table", no_measuring)
    monkeypatch.setattr(engine_module, "cost_table_steps", no_measuring)
    engine = Engine(model_path, CONFIG)
    try:
        [result] = engine.run([REQUEST])
        assert result.ok and result.text
        assert engine.speculator.cost is DEFAULT_COST_TABLE
        assert not list(fresh_cache.glob("speculator/cost-*"))
    finally:
        engine.close()


def test_refine_costs_measures_then_drafts_by_this_machines_table(
    model_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "_busy", lambda: False)
    engine = Engine(model_path, CONFIG)
    try:
        steps = engine.refine_costs()
        yielded = sum(1 for _ in steps)
        assert yielded > 9  # a step per timed call: rounds over the 9 shapes of one sequence
        measured = engine.speculator.cost
        assert isinstance(measured, CostTable) and measured is not DEFAULT_COST_TABLE
        assert measured.seqs == (1,)
        assert load_cost_table(engine.model, n_threads=CONFIG.threads, max_seqs=1) == measured  # cached
        assert sum(1 for _ in engine.refine_costs()) == 0  # measured once
        [result] = engine.run([REQUEST])
        assert result.ok
    finally:
        engine.close()
    again = Engine(model_path, CONFIG)
    try:
        assert again.speculator.cost == measured  # the next process loads it
    finally:
        again.close()


def test_a_busy_machine_is_not_measured_until_it_is_idle(
    model_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = [True, True, False]
    monkeypatch.setattr(engine_module, "_busy", lambda: busy.pop(0) if busy else False)
    engine = Engine(model_path, CONFIG)
    try:
        steps = engine.refine_costs()
        assert [next(steps), next(steps)] == [engine_module.BUSY_RETRY_S] * 2  # pauses, then looks again
        assert next(steps) is None  # idle: the first timed call
        steps.close()  # closed early (the backend closing): its context freed, nothing cached
        assert engine.speculator.cost is DEFAULT_COST_TABLE
        assert not list(fresh_cache.glob("speculator/cost-*"))
    finally:
        engine.close()


def test_the_backend_measures_in_idle_time_and_stops_when_closed(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registered: list[Generator[float | None, None, None]] = []
    monkeypatch.setattr(backend_module, "when_idle", registered.append)
    backend = LlamaCppBackend(max_seqs=1, engine_config=CONFIG)
    reply = backend.chat("Name one planet.", SamplingParams(max_tokens=8))
    assert reply.text
    [work] = registered
    assert backend.engine.speculator.cost is DEFAULT_COST_TABLE  # the answer did not wait for the table
    backend.close()
    assert next(work, "closed") == "closed"  # closed with the engine: it never touches a freed model
    assert not list(fresh_cache.glob("speculator/cost-*"))
