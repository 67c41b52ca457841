"""The tiny LFM2 built to copy (``evals.synthetic.copier``): it continues its prompt, as an extraction reply
quotes its excerpt, so speculation on a hybrid model drafts, is accepted, is rejected part way and rolls its
recurrent state back on real replies, not only on scripted drafts; replies stay those of plain decoding."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from minions.backends.llamacpp.engine import Engine, EngineConfig
from minions.backends.speculation import CostCurve, Draft, SpeedGate
from minions.errors import ConfigError
from minions.types import ChatRequest, Message, SamplingParams

pytestmark = pytest.mark.slow

REPORT = Path(__file__).parents[3] / "examples" / "northwind-annual-report-2025.md"


@pytest.fixture(scope="module")
def engine(copier: Path) -> Iterator[Engine]:
    config = EngineConfig(n_ctx=4096, seq_ctx=2048, max_seqs=4, learn_drafts=False, flash_attn=True,
                          share_prefixes=False)  # fmt: skip
    engine = Engine(copier, config)
    assert engine.model.memory == "hybrid"
    yield engine
    engine.close()


def _requests() -> list[ChatRequest]:
    text = REPORT.read_text()
    excerpts = [text[:2500], text[2500:5000]]
    questions = ("Quote the sentence about revenue.", "Quote what the report says about risks.")
    return [ChatRequest([Message("user", f"Excerpt:\n{ex}\n\n{q}")], SamplingParams(max_tokens=64, **params))
            for ex in excerpts for q in questions
            for params in ({}, {"temperature": 0.7, "seed": 3})]  # type: ignore[arg-type]  # fmt: skip


def test_it_continues_a_sequence_from_where_its_last_tokens_occurred(engine: Engine) -> None:
    rng = np.random.default_rng(0)
    right = 0
    for _ in range(10):
        seq = [int(t) for t in rng.choice(np.arange(1000, 40000), 60, replace=False)]
        k = int(rng.integers(3, 55))
        logits = engine.logits_after([*seq, *seq[k - 2 : k + 1]])  # the three tokens before seq[k + 1], again
        right += int(np.argmax(logits)) == seq[k + 1]
    assert right == 10


def test_its_replies_are_quotes_of_the_prompt(engine: Engine) -> None:
    engine.clear_cache()
    results = engine.run(_requests()[::2], speculate=False, trace_tokens=True)
    for r in results:
        reply, prompt = r.stats["token_ids"], r.stats["prompt_ids"]
        grams = {tuple(prompt[i : i + 4]) for i in range(len(prompt) - 3)}
        quoted = sum(tuple(reply[i : i + 4]) in grams for i in range(len(reply) - 3))
        assert len(reply) > 16 and quoted >= 0.8 * (len(reply) - 3), r.text


def test_speculation_drafts_rolls_back_and_equals_plain_on_its_replies(engine: Engine) -> None:
    engine.clear_cache()
    plain = engine.run(_requests(), speculate=False, trace_tokens=True)
    engine.speculator.cost = CostCurve.linear(0.05)  # verify tokens nearly free: draft whenever offered
    engine.speculator.gate = None
    engine.clear_cache()
    spec = engine.run(_requests(), trace_tokens=True)
    assert [r.stats["token_ids"] for r in spec] == [r.stats["token_ids"] for r in plain]
    batch = spec[0].stats["batch"]
    # the context drafter's guesses of a quote are mostly right, sometimes wrong part way: both paths ran
    assert batch["drafted"] > 100 and batch["accepted"] > 0.5 * batch["drafted"]
    assert batch["rollbacks"] > 5 and batch["redo_tokens"] >= batch["rollbacks"]
    assert sum(r.stats["verify_steps"] for r in spec) < 0.6 * sum(len(r.stats["token_ids"]) for r in spec)


def test_only_lfm2_has_copying_weights(tmp_path: Path) -> None:
    from minions.evals.synthetic.tiny import write_tiny_model

    with pytest.raises(ConfigError, match="lfm2"):
        write_tiny_model(tmp_path / "x.gguf", "granitehybrid", tokenizer_from=REPORT, copies=True)


SAMPLE_S = 0.25
"""A sampling step made slow, so that a step timed with it stands out from any step timed without."""


def test_the_speed_gate_times_steps_without_their_sampling(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # a grammar's masking can take longer than the call, and more inside JSON's punctuation than inside a quote:
    # in the gate's step times it would compare the phases of a reply instead of speculative and plain steps
    from minions.backends.llamacpp.sampling import SequenceSampler

    spec = engine.speculator
    assert spec is not None
    sample, observe = SequenceSampler.sample, spec.observe_step
    steps: list[tuple[bool, float]] = []

    def slow_sample(self: SequenceSampler, logits: np.ndarray) -> int:  # type: ignore[type-arg]
        time.sleep(SAMPLE_S)
        return sample(self, logits)

    def record(seqs: int, emitted: int, seconds: float, *, drafted: bool) -> None:
        steps.append((drafted, seconds))
        observe(seqs, emitted, seconds, drafted=drafted)

    monkeypatch.setattr(SequenceSampler, "sample", slow_sample)
    monkeypatch.setattr(spec, "observe_step", record)
    spec.cost = CostCurve.linear(0.05)
    spec.gate = SpeedGate()
    engine.clear_cache()
    request = _requests()[0]
    results = engine.run([replace(request, params=replace(request.params, max_tokens=40))], trace_tokens=True)
    assert all(r.ok for r in results)
    # every step sampled at least once (SAMPLE_S); the steps, drafted and plain, take a few ms without it (tens
    # on a loaded machine)
    assert {drafted for drafted, _ in steps} == {True, False}
    assert max(seconds for _, seconds in steps) < SAMPLE_S / 2


def test_the_speed_gate_judges_speculation_by_steps_that_verified_drafts(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a step whose drafts were all cut to nothing is plain decoding plus its drafters' time: counted as a
    # speculative step, it made the gate back off from drafting for hundreds of steps (SmolLM2, extraction)
    spec = engine.speculator
    assert spec is not None
    drafting, propose, observe = spec.drafting, spec.propose, spec.observe_step
    steps: list[list[tuple[str, bool]]] = []  # per decode step: may it draft, did it, what the gate was told

    def may_draft(seqs: int = 1) -> bool:
        steps.append([("may draft", drafting(seqs))])
        return steps[-1][0][1]

    def proposed(jobs: list[tuple[int, list[int], int]], carried: list[int] | None = None) -> list[Draft]:
        drafts = propose(jobs, carried)
        if len(steps) % 2:  # every other step, as if the depth chooser had cut every draft to nothing
            drafts = [Draft(offers=d.offers) for d in drafts]
        steps[-1].append(("drafted", any(d.tokens for d in drafts)))
        return drafts

    def observed(seqs: int, emitted: int, seconds: float, *, drafted: bool) -> None:
        steps[-1].append(("told", drafted))
        observe(seqs, emitted, seconds, drafted=drafted)

    monkeypatch.setattr(spec, "drafting", may_draft)
    monkeypatch.setattr(spec, "propose", proposed)
    monkeypatch.setattr(spec, "observe_step", observed)
    spec.cost = CostCurve.linear(0.05)  # verify tokens nearly free: the chooser drafts whatever is offered
    spec.gate = SpeedGate()
    engine.clear_cache()
    assert all(r.ok for r in engine.run(_requests()[:4], trace_tokens=True))
    kinds = {tuple(step) for step in steps}
    # plain steps are plain; steps that verified drafts are speculative; steps whose drafts were all cut are
    # neither, and all three happened
    assert kinds == {
        (("may draft", False), ("told", False)),
        (("may draft", True), ("drafted", True), ("told", True)),
        (("may draft", True), ("drafted", False)),
    }
