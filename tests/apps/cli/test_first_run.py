"""A newcomer's first answer: on a fresh cache nothing that only speculation needs runs before it (the cost table
is measured in idle time, later), and the model converted on first use says so in one line."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from minions.apps.cli.main import main
from minions.backends.llamacpp import backend as backend_module
from minions.backends.llamacpp import cost_table, worker
from minions.backends.llamacpp import engine as engine_module
from minions.backends.llamacpp.quantize import default_local_model

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "northwind-annual-report-2025.md"
QUESTION = "What was Northwind's total revenue in 2025, and how did it change from 2024?"


def no_measuring(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the cost table was measured before the first answer")


def test_a_first_ask_converts_the_model_in_one_line_and_measures_no_cost_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path))  # as after a fresh set-up: nothing converted or measured
    monkeypatch.delenv("MINIONS_LOCAL", raising=False)
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    for module, name in ((cost_table, "measure_cost_table"), (engine_module, "load_or_measure_cost_table"),
                         (engine_module, "cost_table_steps")):  # fmt: skip
        monkeypatch.setattr(module, name, no_measuring)
    idle: list[Generator[float | None, None, None]] = []
    monkeypatch.setattr(backend_module, "when_idle", idle.append)

    code = main(["ask", str(EXAMPLE), QUESTION])
    out, err = capsys.readouterr()

    assert code == 0 and "$31.8 million" in out
    converted = [line for line in err.splitlines() if "convert" in line]
    assert converted == [
        f"minions: converting SmolLM2-135M-Instruct.Q4_1.gguf to Q4_0 for this CPU, once (a second or two), "
        f"into {tmp_path / 'models'}"
    ], err
    assert not list(tmp_path.glob("speculator/cost-*"))  # measured later, in idle time
    assert len(idle) == 1  # the measurement waits for idle time

    default_local_model()  # the converted copy is kept: no second line
    assert "convert" not in capsys.readouterr().err
    for work in idle:
        worker.submit(work.close).result(timeout=60)
