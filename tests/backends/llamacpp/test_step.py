"""The decode step's parts that need no model: how long a draft may be."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from minions.backends.llamacpp.sequence import EngineSequence
from minions.backends.llamacpp.slots import Slot
from minions.backends.llamacpp.step import draft
from minions.backends.speculation.speculator import NO_DRAFT
from minions.types import SamplingParams


class Asked:
    """A speculator that records what it is asked and drafts nothing."""

    def __init__(self) -> None:
        self.jobs: list[tuple[int, Sequence[int], int]] = []
        self.carried: Sequence[int] | None = None

    def propose(self, jobs: Sequence[tuple[int, Sequence[int], int]], carried: Sequence[int] | None = None) -> Any:
        self.jobs, self.carried = list(jobs), carried
        return [NO_DRAFT] * len(jobs)


def job(seq: int, *, prompt: int, generated: int, max_new: int, redo: int = 0) -> EngineSequence:
    j = EngineSequence(seq, list(range(prompt)), SamplingParams(), 0, max_new=max_new, slot=Slot(seq))
    j.generated = [7] * generated
    j.n_past = prompt + generated - 1 - redo  # the pending token (and the tokens to compute again) are not in
    j.speculation.redo = [7] * redo
    return j


def test_a_draft_fits_the_call_the_sequence_and_the_reply() -> None:
    lane: Any = SimpleNamespace(batch=SimpleNamespace(capacity=64), slots=SimpleNamespace(capacity=100))
    jobs = [
        job(0, prompt=10, generated=5, max_new=400),  # the call: 64 // 2 - 1 = 31 tokens a job, less the pending one
        job(3, prompt=80, generated=10, max_new=400, redo=2),  # its sequence: 100 - 87 - 2 - 1 = 10
    ]
    asked = Asked()
    assert draft(asked, lane, jobs) == [NO_DRAFT, NO_DRAFT]  # type: ignore[arg-type]
    assert [(seq, len(tokens), room) for seq, tokens, room in asked.jobs] == [(0, 15, 31), (3, 90, 10)]
    assert asked.carried == [1, 3]  # the pending token, and the confirmed ones computed again

    near_the_end = job(1, prompt=10, generated=5, max_new=8)
    draft(asked, lane, [near_the_end])
    assert asked.jobs[0][2] == 3  # what is left of the reply
