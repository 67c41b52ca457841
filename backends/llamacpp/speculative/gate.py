"""Whether to speculate at all: the run's own steps, speculative against plain, timed as they happen.

``choose_depths`` weighs a draft against the cost table, which sees one thing: the decode call, as it cost when
the table was measured. A step costs more than its call, and only when it speculates: every sequence's drafters
run, every proposal is scored against what the step emitted, rejected cells are rolled back (Python time that
grows with the batch), and the call's threads fare differently when other processes share the cores. On a
loaded 2-core machine that made extraction at batch 8 0.93x of plain decoding while the table promised a gain.
So the engine also measures what it gets, step by step, in units that do not depend on the batch size:

- a step over ``s`` sequences that emitted ``e`` tokens in ``t`` seconds (its sampling left out: both ways sample
  once per emitted token, and a grammar makes that slow in some phases of a reply and fast in others) did
  ``w = e / s`` plain steps' work
  (a plain step emits one token per sequence) in ``u = t / T_s(s)`` table-plain-steps' time;
- plain steps give the plain pace ``u_plain``, their mean time over the latest ones (``window``); the latest
  speculative steps give their rate, all their work over all their time; the measured gain is ``rate x
  u_plain``: tokens per second, speculative over plain, which is what a run gets. Not medians: speculative step
  times are skewed (at batch 8, plain steps took 0.8 to 1.5 table steps, speculative ones 1.0 to 5.3: a long
  draft gives the call its widest shape), and a median of ratios missed losses (an extraction run at batch 8 at
  0.966x of plain decoding, whose gate measured a median gain of 1.069). A step slowed by something else (a
  thread of the call descheduled by another process) weighs 1 in ``min_steps`` of a trial.

While speculating, one step in ``probe_every`` is plain, to keep ``u_plain`` current. When the gain of at least
``min_steps`` speculative steps is under 1, the engine decodes plainly (no drafting at all) for ``backoff``
steps, doubled after every loss in a row, then tries again with fresh measurements; a win resets the back-off.
So speculation that loses costs a few steps in every ``backoff``, not the run.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SpeedGate"]


@dataclass
class SpeedGate:
    """Speculative vs plain steps, measured; ``speculate()`` says what the next step does, ``observe`` what
    it took."""

    probe_every: int = 16
    min_steps: int = 8
    backoff_steps: int = 32
    max_backoff: int = 512
    window: int = 16
    """Latest plain and speculative steps that are compared."""
    plain: deque[float] = field(init=False)
    """Paces of the latest plain steps: seconds over the table's plain step (``u``)."""
    rates: deque[tuple[float, float]] = field(init=False)
    """Work and time of the latest speculative steps since speculation last (re)started: ``(w, u)``."""
    backoff: int = 0
    """Plain steps still to go before speculation is tried again."""
    next_backoff: int = 0
    step: int = 0
    plain_steps: int = 0
    """Steps the gate made plain (probes and back-off)."""
    losses: int = 0

    def __post_init__(self) -> None:
        self.plain = deque(maxlen=self.window)
        self.rates = deque(maxlen=self.window)

    def speculate(self) -> bool:
        """Whether the next decode step drafts: no while backing off and on every ``probe_every``-th step (the
        second step too, while no plain step has been seen)."""
        self.step += 1
        if self.backoff > 0:
            self.backoff -= 1
            if self.backoff == 0:
                self.rates.clear()  # a fresh trial
        elif (not self.plain and self.step == 2) or self.step % self.probe_every == 0:
            pass
        else:
            return True
        self.plain_steps += 1
        return False

    def observe(self, drafted: bool, work: float, pace: float) -> None:
        """A step did ``work`` plain steps' work (emitted tokens / sequences) in ``pace`` plain steps' time
        (seconds / the table's plain step for its sequences); ``drafted``: it was a speculative step."""
        if pace <= 0.0:
            return
        if not drafted:
            self.plain.append(pace)
            return
        self.rates.append((work, pace))
        gain = self.gain
        if gain is None or len(self.rates) < self.min_steps:
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
        if not self.plain or not self.rates:
            return None
        work = sum(w for w, _ in self.rates)
        spent = sum(u for _, u in self.rates)
        return work / spent * sum(self.plain) / len(self.plain)

    def to_dict(self) -> dict[str, Any]:
        gain = self.gain
        return {"gain": None if gain is None else round(gain, 3), "gated_plain_steps": self.plain_steps,
                "losses": self.losses}  # fmt: skip
