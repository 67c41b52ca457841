"""Whether to speculate at all: the run's own steps, speculative against plain, timed as they happen.

``choose_depths`` weighs a draft against the cost table, which sees one thing: the decode call, as it cost when
the table was measured. A step costs more than its call, and only when it speculates: every sequence's drafters
run, every proposal is scored against what the step emitted, rejected cells are rolled back (Python time that
grows with the batch), and the call's threads fare differently when other processes share the cores. On a
loaded 2-core machine that made extraction at batch 8 0.93x of plain decoding while the table promised a gain.
So the engine also measures what it gets, step by step, for each batch size class apart (``SpeedGate``):

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
``min_steps`` speculative steps is under 1, the engine decodes plainly (no drafting at all) for ``backoff_steps``
steps, doubled after every loss in a row, then tries again with fresh measurements; a win resets the back-off.
So speculation that loses costs a few steps in every back-off (at most ``max_backoff``), not the run.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SpeedGate", "size_class"]


@dataclass
class SpeedGate:
    """Speculative vs plain steps, measured, apart for each batch size class (``size_class``): speculation that
    pays for one sequence (1.2-1.8x here) can lose at eight, where a call costs nearly in proportion to its
    tokens, and one measure for both kept it on at eight (an extraction run at batch 8 at 0.93x of plain
    decoding, its gate's gain 1.46 from the run's last, smaller steps). ``speculate(seqs)`` says what the next
    step over ``seqs`` sequences does, ``observe`` what it took."""

    probe_every: int = 16
    min_steps: int = 8
    backoff_steps: int = 32
    max_backoff: int = 512
    window: int = 16
    """Latest plain and speculative steps that are compared."""
    trials: dict[int, Trial] = field(default_factory=dict)
    """Each size class's measurements."""
    last: int = 1
    """The size class observed last (``gain`` is its gain)."""

    def _trial(self, size: int) -> Trial:
        if size not in self.trials:
            self.trials[size] = Trial(self.window)
        return self.trials[size]

    def speculate(self, seqs: int = 1) -> bool:
        """Whether the next decode step over ``seqs`` sequences drafts: no while its size class backs off and
        on every ``probe_every``-th step of it (the second too, while it has seen no plain step)."""
        t = self._trial(size_class(seqs))
        t.step += 1
        if t.backoff > 0:
            t.backoff -= 1
            if t.backoff == 0:
                t.rates.clear()  # a fresh trial
        elif (not t.plain and t.step == 2) or t.step % self.probe_every == 0:
            pass
        else:
            return True
        t.plain_steps += 1
        return False

    def observe(self, drafted: bool, work: float, pace: float, seqs: int = 1) -> None:
        """A step over ``seqs`` sequences did ``work`` plain steps' work (emitted tokens / sequences) in ``pace``
        plain steps' time (seconds / the table's plain step for its sequences); ``drafted``: it was a
        speculative step."""
        if pace <= 0.0:
            return
        self.last = size_class(seqs)
        t = self._trial(self.last)
        if not drafted:
            t.plain.append(pace)
            return
        t.rates.append((work, pace))
        gain = t.gain
        if gain is None or len(t.rates) < self.min_steps:
            return
        if gain < 1.0:  # speculation loses here and now: plain decoding for a while, longer each time in a row
            t.next_backoff = min(self.max_backoff, max(self.backoff_steps, 2 * t.next_backoff))
            t.backoff = t.next_backoff
            t.losses += 1
        else:
            t.next_backoff = 0

    @property
    def gain(self) -> float | None:
        """Measured tokens per second of speculative steps over plain ones in the size class observed last
        (None until both are seen)."""
        t = self.trials.get(self.last)
        return None if t is None else t.gain

    @property
    def losses(self) -> int:
        return sum(t.losses for t in self.trials.values())

    @property
    def plain_steps(self) -> int:
        """Steps the gate made plain (probes and back-off)."""
        return sum(t.plain_steps for t in self.trials.values())

    @property
    def step(self) -> int:
        return sum(t.step for t in self.trials.values())

    def to_dict(self) -> dict[str, Any]:
        gains = {size: None if t.gain is None else round(t.gain, 3) for size, t in sorted(self.trials.items())}
        return {"gain": gains, "gated_plain_steps": self.plain_steps, "losses": self.losses}


def size_class(seqs: int) -> int:
    """1, 2-3, 4-7, 8-15, ...: the largest power of two not above ``seqs``."""
    return 1 << (max(1, seqs).bit_length() - 1)


@dataclass
class Trial:
    """One size class's latest plain and speculative steps, and its back-off."""

    window: int
    plain: deque[float] = field(init=False)
    """Paces of the latest plain steps: seconds over the table's plain step (``u``)."""
    rates: deque[tuple[float, float]] = field(init=False)
    """Work and time of the latest speculative steps since speculation last (re)started: ``(w, u)``."""
    backoff: int = 0
    """Plain steps still to go before speculation is tried again."""
    next_backoff: int = 0
    step: int = 0
    plain_steps: int = 0
    losses: int = 0

    def __post_init__(self) -> None:
        self.plain = deque(maxlen=self.window)
        self.rates = deque(maxlen=self.window)

    @property
    def gain(self) -> float | None:
        if not self.plain or not self.rates:
            return None
        work = sum(w for w, _ in self.rates)
        spent = sum(u for _, u in self.rates)
        return work / spent * sum(self.plain) / len(self.plain)
