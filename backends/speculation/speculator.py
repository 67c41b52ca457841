"""The speculator: each decode step, a draft for every generating sequence, and what the step taught.

An engine (``backends.llamacpp.scheduler``) asks ``propose`` for drafts, puts ``[pending, d_1 .. d_k]`` of every
sequence into its one decode call with logits after each token, verifies with ``tree.accept`` and rolls back the
rejected tokens' cells; then it tells ``learn`` what each sequence emitted. A step reads: plan the drafts
(``drafting``, ``propose``), run the call, apply the rule, report (``observe_call``, ``learn``,
``observe_step``). An engine that does not speculate holds a ``NullSpeculator``, which never drafts. Here:

1. every drafter proposes up to ``room`` tokens for a sequence; the sequence takes the proposal with the most
   expected tokens ``E(a, len)`` under its acceptance estimate ``a`` for that drafter;
2. ``choose_depths`` cuts each proposal to the length that maximises the batch's expected tokens per second on
   this machine's measured cost curve (0 is plain decoding for that sequence);
3. every drafter's proposal, verified or not, is scored against the emitted tokens, so a drafter that was cut
   to 0 keeps an estimate and comes back when it starts guessing well;
4. the engine times every step, drafting and verifying included, and a speed gate (``SpeedGate``) makes
   steps plain (no drafting at all) while speculative steps have measured slower than plain ones: the table
   sees only the call, as it cost when it was measured, not the step around it on the machine as it is now.

The speed gate (``SpeedGate``): ``choose_depths`` weighs a draft against the cost table, which sees one thing:
the decode call, as it cost when the table was measured. A step costs more than its call, and only when it
speculates: every sequence's drafters run, every proposal is scored against what the step emitted, rejected
cells are rolled back (Python time that grows with the batch), and the call's threads fare differently when
other processes share the cores. On a loaded 2-core machine that made extraction at batch 8 0.93x of plain
decoding while the table promised a gain. So the engine also measures what it gets, step by step, for each
batch size class apart:

- a step over ``s`` sequences that emitted ``e`` tokens in ``t`` seconds (its sampling left out: both ways sample
  once per emitted token, and a grammar makes that slow in some phases of a reply and fast in others) did
  ``w = e / s`` plain steps' work (a plain step emits one token per sequence) in ``u = t / T_s(s)``
  table-plain-steps' time;
- plain steps give the plain pace ``u_plain``, their mean time over the latest ones (``window``); the latest
  speculative steps give their rate, all their work over all their time; the measured gain is ``rate x
  u_plain``: tokens per second, speculative over plain, which is what a run gets. Not medians: speculative step
  times are skewed (at batch 8, plain steps took 0.8 to 1.5 table steps, speculative ones 1.0 to 5.3: a long
  draft gives the call its widest shape), and a median of ratios missed losses (an extraction run at batch 8 at
  0.966x of plain decoding, whose gate measured a median gain of 1.069). A step slowed by something else (a
  thread of the call descheduled by another process) weighs 1 in ``min_steps`` of a trial.

While speculating, one step in ``probe_every`` is plain, to keep ``u_plain`` current. When the gain of at least
``min_steps`` sequence-steps of speculation (``min_steps`` steps of one sequence, ``min_steps / s`` steps of ``s``,
and never fewer than ``MIN_JUDGED``) is under 1, the engine decodes plainly (no drafting at all) for ``backoff_steps``
sequence-steps (32 steps of one sequence, 4 of eight), doubled after every loss in a row, then tries again with
fresh measurements; a win resets the back-off. Counted in steps, a back-off at 8 sequences outlasted the run
(40-token replies: about 15 steps of 8), so a trial lost while the acceptance estimates still warmed up made
the whole run plain (extraction on the 1B target at 0.90x of plain decoding, 248 of 280 sequence-steps plain).
So speculation that loses costs a few steps in every back-off (at most ``max_backoff``), not the run.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minions.errors import ConfigError

from .depth import AcceptanceTracker, CallCost, CostCurve, CostTable, choose_depths, expected_tokens
from .drafters import Constraint, ContextLookup, Drafter, TraceCache, schema_key

__all__ = [
    "K_MAX",
    "NO_DRAFT",
    "Draft",
    "DraftStats",
    "NullSpeculator",
    "Speculator",
    "SpeedGate",
    "default_drafters",
    "size_class",
]

log = logging.getLogger(__name__)

# The persisted trace caches are written at most this often (and when the engine closes).
SAVE_EVERY_S = 30.0
# Weight of each call in the running ratio of observed to measured call time.
CALIBRATION_ALPHA = 0.05
K_MAX = 8
"""The longest draft of one sequence verified in one step (the llama.cpp engine's default)."""
PROBE_EVERY = 8
PROBE_TOKENS = 2
"""A costly drafter planned out of every draft still drafts this many tokens one step in ``PROBE_EVERY``."""


@dataclass(frozen=True, slots=True)
class Draft:
    drafter: str = ""
    tokens: tuple[int, ...] = ()
    offers: Mapping[str, Sequence[int]] = field(default_factory=dict)
    """Every drafter's proposal this step, to score against what the step emits."""


NO_DRAFT = Draft()


@dataclass
class DraftStats:
    """One job's speculation, whichever engine decoded it: its verify steps, the tokens they emitted and verified,
    and the tokens drafted and accepted by drafter (``to_dict``: what its ``ChatResult.stats`` report)."""

    drafted: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    steps: int = 0
    emitted: int = 0
    nodes: int = 0
    """Tokens verified: each step's root (the pending token) and its drafts."""
    accepted_lengths: Counter[int] = field(default_factory=Counter)
    """How many steps accepted each number of drafts."""

    def record(self, drafter: str, drafted: int, accepted: int, emitted: int) -> None:
        """One verify step: ``drafted`` tokens of ``drafter`` verified, ``accepted`` of them taken, ``emitted``
        tokens out (the end of generation included)."""
        self.steps += 1
        self.emitted += emitted
        self.nodes += 1 + drafted
        self.accepted_lengths[accepted] += 1
        if drafted:
            self.drafted[drafter] += drafted
            self.accepted[drafter] += accepted

    @property
    def total_drafted(self) -> int:
        return sum(self.drafted.values())

    @property
    def total_accepted(self) -> int:
        return sum(self.accepted.values())

    def to_dict(self) -> dict[str, Any]:
        drafted, accepted = self.total_drafted, self.total_accepted
        return {
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": round(accepted / drafted, 4) if drafted else None,
            "drafted_by_drafter": dict(self.drafted),
            "acceptance_by_drafter": {k: round(self.accepted[k] / n, 4) for k, n in self.drafted.items() if n},
            "verify_steps": self.steps,
            "verified_tokens": self.nodes,
            "tokens_per_step": round(self.emitted / self.steps, 3) if self.steps else None,
            "accepted_lengths": dict(sorted(self.accepted_lengths.items())),
        }


class Speculator:
    """Drafters, their live acceptance, and the machine's cost table.

    ``depth``: a fixed draft length (tests), else adaptive. ``cost``: a function that gives ``T`` (loads or
    measures it, or gives a default that ``refine`` replaces later), called the first time a draft is on offer.
    ``recurrent``: the target's memory rolls back by restoring a checkpoint and computing the accepted tokens again,
    which the choice of depths charges (``depth``)."""

    def __init__(
        self,
        drafters: Sequence[Drafter],
        cost: Callable[[], CostCurve | CostTable],
        *,
        k_max: int = K_MAX,
        depth: int | None = None,
        recurrent: bool = False,
    ) -> None:
        if k_max < 1 or (depth is not None and depth < 1):
            raise ConfigError(f"Drafts need at least one token: k_max {k_max}, depth {depth} (depth None: adaptive).")
        self.drafters = list(drafters)
        self._costly = {d.name for d in self.drafters if d.costly}
        self.recurrent = recurrent
        self.k_max = k_max
        self.depth = depth
        self.tracker = AcceptanceTracker()
        self._measure = cost
        self._cost: CostCurve | CostTable | None = None
        self._calls: CallCost | None = None
        self._saved = time.monotonic()
        self._calibration: dict[bool, float] = {}
        self._probe = 0
        self.paid = False
        """The last ``propose`` asked a costly drafter (a draft model): its step spent time on speculation, whether
        or not a draft was verified, and the speed gate counts it as a speculative step."""
        self.gate: SpeedGate | None = SpeedGate()
        """None: draft as the cost table says whatever the steps measure (tests that need drafts every step)."""

    @property
    def cost(self) -> CostCurve | CostTable:
        """``T``: measured (or loaded from the cache) the first time it is needed."""
        if self._cost is None:
            self._cost = self._measure()
        return self._cost

    @cost.setter
    def cost(self, curve: CostCurve | CostTable) -> None:
        self._cost = curve

    def refine(self, table: CostCurve | CostTable) -> None:
        """Draft by ``table`` from now on, in place of the one it replaces (a default, this machine's measured
        since): the calibration and the speed gate, which count in units of the old table, start afresh."""
        self._cost = table
        self._calibration = {}
        if self.gate is not None:
            self.gate = SpeedGate()

    def start(self, seq: int, schema: Mapping[str, Any] | None, constraint: Constraint | None = None) -> None:
        """A job starts on ``seq``: drafters that draft per schema (the grammar trace) switch to its schema, and
        drafters that draft under its grammar (a draft model) take its ``constraint``."""
        for drafter in self.drafters:
            if drafter.per_schema or drafter.constrained:
                drafter.start(seq, schema_key(schema), constraint)

    def prefill(self, seq: int, prompt: Sequence[int]) -> None:
        """A job's prompt on ``seq`` is computed: a draft model computes it too, now (its time counts as the
        prompt's, not as the first decode step's)."""
        for drafter in self.drafters:
            if drafter.costly:
                drafter.prefill(seq, prompt)

    def propose(
        self, jobs: Sequence[tuple[int, Sequence[int], int]], carried: Sequence[int] | None = None
    ) -> list[Draft]:
        """``jobs``: ``(seq, tokens so far, room)`` of each generating sequence; one draft each (maybe empty).
        ``carried``: the tokens each sequence's call holds without a draft (1, its pending token, unless it
        computes confirmed ones again after a rollback)."""
        offers: list[dict[str, list[int]]] = [{} for _ in jobs]
        longest = self.k_max if self.depth is None else min(self.k_max, self.depth)  # nothing drafted to be cut
        rooms = [min(room, longest) for _, _, room in jobs]
        self.paid = False
        for drafter in sorted(self.drafters, key=lambda d: d.costly):  # lookups first: a plan counts their offers
            lengths = self._planned(drafter, jobs, rooms, offers, carried) if drafter.costly else rooms
            asks = [(seq, tokens, k) for (seq, tokens, _), k in zip(jobs, lengths, strict=True) if k > 0]
            self.paid = self.paid or (drafter.costly and bool(asks))
            got = iter(drafter.propose_many(asks) if asks else ())
            for i, k in enumerate(lengths):
                if k > 0:
                    offers[i][drafter.name] = next(got)
        picks: list[tuple[str, list[int], float]] = []
        for (seq, _, _), offered in zip(jobs, offers, strict=True):
            best: tuple[str, list[int], float] = ("", [], 0.0)
            for name, proposal in offered.items():
                a = self.tracker.get(seq, name)
                if proposal and expected_tokens(a, len(proposal)) > expected_tokens(best[2], len(best[1])):
                    best = (name, proposal, a)
            picks.append(best)
        if not any(p[1] for p in picks):
            return [Draft(offers=o) for o in offers]
        if self.depth is not None:
            depths = [min(self.depth, len(p[1])) for p in picks]
        else:
            rollback_s = self.cost.rollback_s if self.recurrent else None
            worth = [self._worth(seq, p[0]) for (seq, _, _), p in zip(jobs, picks, strict=True)]
            step = self._step_cost([seq for seq, _, _ in jobs])
            depths = choose_depths([p[2] for p in picks], [len(p[1]) for p in picks], step,
                                   base=carried, rollback_s=rollback_s, outcomes=worth)  # fmt: skip
        return [Draft(name, tuple(tokens[:k]), offered) if k else Draft(offers=offered)
                for (name, tokens, _), offered, k in zip(picks, offers, depths, strict=True)]  # fmt: skip

    def _planned(
        self,
        drafter: Drafter,
        jobs: Sequence[tuple[int, Sequence[int], int]],
        rooms: Sequence[int],
        offers: Sequence[Mapping[str, Sequence[int]]],
        carried: Sequence[int] | None,
    ) -> list[int]:
        """How many tokens a costly drafter drafts for each sequence: the lengths that maximise the batch's
        expected tokens per second counting its drafting time too (``draft_seconds`` a position, for the longest
        draft, since a position is one call over all the sequences), none where a lookup's offer is worth more.
        Where that plans no draft at all, one step in ``PROBE_EVERY`` still drafts ``PROBE_TOKENS``, so that its
        acceptance estimate follows the reply and it comes back where it starts to pay (at once, for a drafter
        never measured)."""
        if self.depth is not None:
            return list(rooms)
        caps, base = [], []
        for i, ((seq, _, _), room, offered) in enumerate(zip(jobs, rooms, offers, strict=True)):
            a = self.tracker.get(seq, drafter.name)
            rival = max(offered.items(), default=("", ()),
                        key=lambda o: expected_tokens(self.tracker.get(seq, o[0]), len(o[1])))  # fmt: skip
            wins = expected_tokens(a, room) > expected_tokens(self.tracker.get(seq, rival[0]), len(rival[1]))
            caps.append(room if wins else 0)
            # a sequence a lookup drafts for carries that draft in the call (roughly: depths are chosen later)
            base.append((1 if carried is None else carried[i]) + (0 if wins else len(rival[1])))
        if not any(caps):
            return caps
        per_position = drafter.draft_seconds(len(jobs))
        step = self._step_cost([seq for seq, _, _ in jobs])

        def cost(lengths: Sequence[float]) -> float:
            drafted = max(length - b for length, b in zip(lengths, base, strict=True))
            return step(lengths) + per_position * max(0.0, drafted)

        acceptance = [self.tracker.get(seq, drafter.name) for seq, _, _ in jobs]
        worth = [self.tracker.outcomes(seq, drafter.name) for seq, _, _ in jobs]
        lengths = choose_depths(acceptance, caps, cost, base=base, outcomes=worth)
        self._probe = (self._probe + 1) % PROBE_EVERY
        # never measured, it probes at once: a draft model right 9 times in 10 sat out a run's first 8 steps
        if not any(lengths) and (self._probe == 0 or drafter.name not in self.tracker.drafters):
            return [min(cap, PROBE_TOKENS) for cap in caps]
        return lengths

    def _worth(self, seq: int, name: str) -> float:
        """What a drafter's estimate is worth to ``choose_depths``: its outcomes for a draft model, whose tokens
        are accepted independently of each other (SmolLM2 for the 1B target: ``j`` in a row within 0.06 of
        ``a^j`` up to 12), so that a long draft gains from the estimate's uncertainty; exact for a lookup, whose
        copied span is right or wrong as a whole (weighed as a draft model's, it drafted longer and lost:
        SmolLM2 alone on free-form at batch 1, 1.08x against 1.12x)."""
        return self.tracker.outcomes(seq, name) if name in self._costly else math.inf

    def _step_cost(self, seqs: Sequence[int]) -> Callable[[Sequence[float]], float]:
        """``T`` of a call over the sequences ``seqs`` (their ids, in the call's order) by the tokens each carries
        (``CallCost``), its draft part scaled by how much more (or less) than measured the drafted calls of this
        engine have cost, relative to its plain calls."""
        calls = self.call_cost
        base = calls([1.0] * len(seqs), seqs)
        scale = self.draft_cost_scale

        def cost(lengths: Sequence[float]) -> float:
            return base + scale * (calls(lengths, seqs) - base)  # T(plain) + f (T(lengths) - T(plain))

        return cost

    @property
    def call_cost(self) -> CallCost:
        """``T`` of a call by the tokens each of its sequences carries, over the cost table."""
        if self._calls is None or self._calls.table is not self.cost:
            self._calls = CallCost(self.cost)
        return self._calls

    @property
    def draft_cost_scale(self) -> float:
        """Observed / measured seconds of drafted calls, over the same for plain calls (1 until both are seen):
        the cost table was measured at one context length on an idle machine; this corrects it for the jobs'
        contexts and the machine's load as they are."""
        if len(self._calibration) < 2:
            return 1.0
        return min(4.0, max(0.5, self._calibration[True] / self._calibration[False]))

    def observe_call(self, lengths: Sequence[int], seconds: float, seqs: Sequence[int] | None = None) -> None:
        """A decode call whose sequences (``seqs``: their ids, in the call's order) carried ``lengths`` tokens took
        ``seconds``. Ignored until the cost table is there: it is measured when a draft is first on offer, not
        for calls that never had one."""
        if self._cost is None or not lengths:
            return
        ratio = seconds / max(1e-9, self.call_cost(lengths, seqs))
        drafted = sum(lengths) > len(lengths)
        old = self._calibration.get(drafted)
        self._calibration[drafted] = ratio if old is None else old + CALIBRATION_ALPHA * (ratio - old)

    def drafting(self, seqs: int = 1) -> bool:
        """Whether the next decode step over ``seqs`` sequences drafts at all: always with a fixed ``depth``,
        else as the speed gate says (plain while measured speculative steps over as many sequences have been
        slower than plain ones; see ``SpeedGate``)."""
        return self.depth is not None or self.gate is None or self.gate.speculate(seqs)

    def observe_step(self, seqs: int, emitted: int, seconds: float, *, drafted: bool) -> None:
        """A decode step over ``seqs`` sequences emitted ``emitted`` tokens in ``seconds`` (drafting, the call
        and verifying); ``drafted``: it verified drafts (a step whose drafts were all cut to nothing is not
        reported). Feeds the speed gate, in units of the table's plain step for ``seqs`` sequences (ignored until
        the table is there)."""
        if self._cost is None or self.gate is None or seqs <= 0:
            return
        plain = max(1e-9, self.call_cost.curve(seqs)(seqs))  # the curve kept: a table interpolates counts anew
        self.gate.observe(drafted, emitted / seqs, seconds / plain, seqs)

    def learn(self, seq: int, draft: Draft, emitted: Sequence[int], *, ended: bool = False) -> None:
        """Score every drafter's proposal against the tokens the step emitted (``ended``: the job's reply ended
        in this step and its sequence is already free; its drafters' estimates still learn)."""
        for name, proposal in draft.offers.items():
            self.tracker.observe(seq, name, proposal, emitted)
        if ended:
            self.tracker.forget(seq)

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        """A job on ``seq`` ended with ``tokens`` (its prompt and, if it has a reply worth learning, the reply)."""
        for drafter in self.drafters:
            drafter.finish(seq, tokens, n_prompt)
        self.tracker.forget(seq)

    def reset(self) -> None:
        """Forget what was learnt (the trace caches and the acceptance estimates), for a fair benchmark run."""
        for drafter in self.drafters:
            if drafter.learns:
                drafter.reset()
        self.tracker = AcceptanceTracker()
        self._calibration = {}
        if self.gate is not None:
            self.gate = SpeedGate()

    def save(self, *, force: bool = False) -> None:
        """Persist the trace caches (at most every ``SAVE_EVERY_S`` unless ``force``)."""
        if not force and time.monotonic() - self._saved < SAVE_EVERY_S:
            return
        self._saved = time.monotonic()
        for drafter in self.drafters:
            if drafter.learns:
                try:
                    drafter.save()
                except OSError as exc:  # a full or read-only cache dir costs the learning, not the run
                    log.warning("could not save what the %s drafter learnt: %s", drafter.name, exc)

    def close(self) -> None:
        self.save(force=True)
        for drafter in self.drafters:
            drafter.close()


class NullSpeculator(Speculator):
    """A speculator that never drafts: an engine that does not speculate holds one, so its steps ask the same
    questions either way (every step is plain; nothing is measured, learnt or saved)."""

    def __init__(self) -> None:
        super().__init__([], _no_cost)

    def drafting(self, seqs: int = 1) -> bool:
        return False


def _no_cost() -> CostCurve:
    raise AssertionError("a speculator that never drafts never needs the cost table")


def default_drafters(model_path: Path, *, persist: bool) -> list[Drafter]:
    """Context lookup, the trace cache of this model, and the per-schema (grammar) trace; the two traces are
    kept under ``cache_dir()/speculator`` when ``persist``."""
    if persist:
        trace = TraceCache.for_model(model_path)
        grammar = TraceCache.for_model(model_path, name="grammar", orders=(3, 2), span=8, per_schema=True)
    else:
        trace, grammar = TraceCache(), TraceCache(name="grammar", orders=(3, 2), span=8, per_schema=True)
    return [ContextLookup(), trace, grammar]


MIN_JUDGED = 2
"""The fewest speculative steps the speed gate judges, whatever their sequences."""


@dataclass
class SpeedGate:
    """Speculative vs plain steps, measured, apart for each batch size class (``size_class``): speculation that
    pays for one sequence (1.2-1.8x here) can lose at eight, where a call costs nearly in proportion to its
    tokens, and one measure for both kept it on at eight (an extraction run at batch 8 at 0.93x of plain
    decoding, its gate's gain 1.46 from the run's last, smaller steps). ``speculate(seqs)`` says what the next
    step over ``seqs`` sequences does, ``observe`` what it took."""

    probe_every: int = 16
    min_steps: int = 8
    """Sequence-steps of speculation judged at once: a step over more sequences averages over more of them, and a
    run at batch 8 was over (about 10 steps of 8 sequences, then fewer) before 8 of its steps could be judged (its
    steps of 8 sequences at 0.73x of plain ones, the run at 0.83x)."""
    backoff_steps: int = 32
    """Sequence-steps of plain decoding after a first loss (a step over ``s`` sequences counts ``s``)."""
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
        if not t.warm:  # the first speculative step of a size class runs shapes that no call has run yet
            t.warm = True
            return
        t.rates.append((work, pace))
        gain = t.gain
        if gain is None or len(t.rates) < max(MIN_JUDGED, self.min_steps // self.last):
            return
        if gain < 1.0:  # speculation loses here and now: plain decoding for a while, longer each time in a row
            t.next_backoff = min(self.max_backoff, max(self.backoff_steps, 2 * t.next_backoff))
            t.backoff = -(-t.next_backoff // self.last)  # sequence-steps, as a trial is
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
    warm: bool = False
    """A speculative step was seen. The first is not judged: its calls (the draft model's over these many
    sequences, the verify call's widest shape) run shapes for the first time, which llama.cpp plans and
    allocates then: at batch 8 the first took 3.4 plain steps for 2 steps' work, the next 1.5, and judged on
    both (a trial at 8 sequences is 2 steps) speculation that paid 1.3x was put off for the whole run."""

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
