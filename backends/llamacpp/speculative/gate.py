"""Whether to speculate at all: the run's own steps, speculative against plain, timed as they happen.

``choose_depths`` weighs a draft against the cost table, which sees one thing: the decode call, as it cost when
the table was measured. A step costs more than its call, and only when it speculates: every sequence's drafters
run, every proposal is scored against what the step emitted, rejected cells are rolled back (Python time that
grows with the batch), and the call's threads fare differently when other processes share the cores. On a
loaded 2-core machine that made extraction at batch 8 0.93x of plain decoding while the table promised a gain.
So the engine also measures what it gets, step by step, in units that do not depend on the batch size:

- a step over ``s`` sequences that emitted ``e`` tokens in ``t`` seconds did ``w = e / s`` plain steps' work
  (a plain step emits one token per sequence) in ``u = t / T_s(s)`` table-plain-steps' time;
- plain steps give the plain pace ``u_plain`` (EMA of ``u``); speculative steps give ``W`` and ``U`` (EMAs of
  ``w`` and ``u``); the measured gain is ``(W / U) / (1 / u_plain) = W u_plain / U``.

While speculating, one step in ``probe_every`` is plain, to keep ``u_plain`` current. When the gain of at least
``min_steps`` speculative steps is under 1, the engine decodes plainly (no drafting at all) for ``backoff``
steps, doubled after every loss in a row, then tries again with fresh measurements; a win resets the back-off.
So speculation that loses costs a few steps in every ``backoff``, not the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SpeedGate"]


@dataclass
class SpeedGate:
    """Speculative vs plain steps, measured; ``speculate()`` says what the next step does, ``observe`` what
    it took."""

    alpha: float = 0.2
    probe_every: int = 16
    min_steps: int = 4
    backoff_steps: int = 32
    max_backoff: int = 512
    plain_pace: float | None = None
    """EMA of a plain step's seconds over the table's plain step (``u_plain``); None until one is seen."""
    work: float = 0.0
    """EMA of the speculative steps' ``w``, since speculation last (re)started."""
    pace: float = 0.0
    """EMA of the speculative steps' ``u``, since speculation last (re)started."""
    trial: int = 0
    """Speculative steps measured since speculation last (re)started."""
    backoff: int = 0
    """Plain steps still to go before speculation is tried again."""
    next_backoff: int = 0
    step: int = 0
    plain_steps: int = 0
    """Steps the gate made plain (probes and back-off)."""
    losses: int = 0

    def speculate(self) -> bool:
        """Whether the next decode step drafts: no while backing off and on every ``probe_every``-th step (the
        second step too, while no plain step has been seen)."""
        self.step += 1
        if self.backoff > 0:
            self.backoff -= 1
            if self.backoff == 0:
                self.trial, self.work, self.pace = 0, 0.0, 0.0  # a fresh trial
        elif (self.plain_pace is None and self.step == 2) or self.step % self.probe_every == 0:
            pass
        else:
            return True
        self.plain_steps += 1
        return False

    def observe(self, drafted: bool, work: float, pace: float) -> None:
        """A step did ``work`` plain steps' work (emitted tokens / sequences) in ``pace`` plain steps' time
        (seconds / the table's plain step for its sequences); ``drafted``: it was a speculative step."""
        if not drafted:
            old = self.plain_pace
            self.plain_pace = pace if old is None else old + self.alpha * (pace - old)
            return
        if self.trial == 0:
            self.work, self.pace = work, pace
        else:
            self.work += self.alpha * (work - self.work)
            self.pace += self.alpha * (pace - self.pace)
        self.trial += 1
        gain = self.gain
        if gain is None or self.trial < self.min_steps:
            return
        if gain < 1.0:  # speculation loses here and now: plain decoding for a while, longer each time in a row
            self.next_backoff = min(self.max_backoff, max(self.backoff_steps, 2 * self.next_backoff))
            self.backoff = self.next_backoff
            self.losses += 1
        else:
            self.next_backoff = 0

    @property
    def gain(self) -> float | None:
        """Measured tokens per second of speculative steps over plain ones (None until both are seen)."""
        if self.plain_pace is None or self.trial == 0 or self.pace <= 0.0:
            return None
        return self.work * self.plain_pace / self.pace

    def to_dict(self) -> dict[str, Any]:
        gain = self.gain
        return {"gain": None if gain is None else round(gain, 3), "gated_plain_steps": self.plain_steps,
                "losses": self.losses}  # fmt: skip
