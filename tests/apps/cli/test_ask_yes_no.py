"""``minions ask FILE "Did ...?" --choose scores`` with no remote model: the answer is "Yes" or "No" (or that the
model is not sure), then the sentence it rests on, from the embedded model; without ``--choose``, the sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from minions.apps.cli.main import main

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "northwind-annual-report-2025.md"


def test_a_yes_no_question_is_answered_yes_or_no_with_its_quote(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    monkeypatch.delenv("MINIONS_LOCAL", raising=False)
    code = main(["ask", str(EXAMPLE), "Did Northwind's revenue grow in 2025?", "--choose", "scores"])
    out = capsys.readouterr().out
    first, second = out.splitlines()[:2]
    assert code == 0 and (first in ("Yes", "No") or first.startswith("Not sure"))
    assert second == "According to northwind-annual-report-2025.md, line 27:" and "$31.8 million" in out
    # by default the quote answers: a 135M model's pick is no better than chance
    assert main(["ask", str(EXAMPLE), "Did Northwind's revenue grow in 2025?"]) == 0
    assert capsys.readouterr().out.startswith("According to northwind-annual-report-2025.md, line 27:")
