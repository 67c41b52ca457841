"""The engine's speculator: each decode step, a draft for every generating sequence, and what the step taught.

The engine (``backends.llamacpp.scheduler``) asks ``propose`` for drafts, puts ``[pending, d_1 .. d_k]`` of every
sequence into its one decode call with logits after each token, verifies with ``rules.sample_compare`` and
rolls back the rejected tokens' cells; then it tells ``learn`` what each sequence emitted. Here:

1. every drafter proposes up to ``room`` tokens for a sequence; the sequence takes the proposal with the most
   expected tokens ``E(a, len)`` under its acceptance estimate ``a`` for that drafter;
2. ``choose_depths`` cuts each proposal to the length that maximises the batch's expected tokens per second on
   this machine's measured cost curve (0 is plain decoding for that sequence);
3. every drafter's proposal, verified or not, is scored against the emitted tokens, so a drafter that was cut
   to 0 keeps an estimate and comes back when it starts guessing well;
4. the engine times every step, drafting and verifying included, and a speed gate (``gate.SpeedGate``) makes
   steps plain (no drafting at all) while speculative steps have measured slower than plain ones: the table
   sees only the call, as it cost when it was measured, not the step around it on the machine as it is now.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .depth import AcceptanceTracker, CallCost, CostCurve, CostTable, choose_depths, expected_tokens
from .drafters import ContextLookup, Drafter, TraceCache, schema_key
from .gate import SpeedGate

__all__ = ["Draft", "DraftStats", "Speculator"]

log = logging.getLogger(__name__)

# The persisted trace caches are written at most this often (and when the engine closes).
SAVE_EVERY_S = 30.0
# Weight of each call in the running ratio of observed to measured call time.
CALIBRATION_ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class Draft:
    drafter: str = ""
    tokens: tuple[int, ...] = ()
    offers: Mapping[str, Sequence[int]] = field(default_factory=dict)
    """Every drafter's proposal this step, to score against what the step emits."""


NO_DRAFT = Draft()


@dataclass
class DraftStats:
    """One job's speculation: tokens drafted and accepted by drafter, and its verify steps."""

    drafted: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    steps: int = 0
    emitted: int = 0

    def record(self, draft: Draft, accepted: int, emitted: int) -> None:
        self.steps += 1
        self.emitted += emitted
        if draft.tokens:
            self.drafted[draft.drafter] += len(draft.tokens)
            self.accepted[draft.drafter] += accepted

    def to_dict(self) -> dict[str, Any]:
        drafted, accepted = sum(self.drafted.values()), sum(self.accepted.values())
        return {
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": round(accepted / drafted, 4) if drafted else None,
            "drafted_by_drafter": dict(self.drafted),
            "acceptance_by_drafter": {k: round(self.accepted[k] / n, 4) for k, n in self.drafted.items() if n},
            "verify_steps": self.steps,
            "tokens_per_step": round(self.emitted / self.steps, 3) if self.steps else None,
        }


class Speculator:
    """Drafters, their live acceptance, and the machine's cost table (measured on first use, then cached).

    ``depth``: a fixed draft length (tests), else adaptive. ``cost``: a function that measures or loads
    ``T``, called the first time a draft is on offer. ``recurrent``: the target's memory rolls back by restoring a
    checkpoint and computing the accepted tokens again, which the choice of depths charges (``depth``)."""

    def __init__(
        self,
        drafters: Sequence[Drafter],
        cost: Callable[[], CostCurve | CostTable],
        *,
        k_max: int = 8,
        depth: int | None = None,
        recurrent: bool = False,
    ) -> None:
        self.drafters = list(drafters)
        self.recurrent = recurrent
        self.k_max = k_max
        self.depth = depth
        self.tracker = AcceptanceTracker()
        self._measure = cost
        self._cost: CostCurve | CostTable | None = None
        self._calls: CallCost | None = None
        self._saved = time.monotonic()
        self._calibration: dict[bool, float] = {}
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

    def start(self, seq: int, schema: Mapping[str, Any] | None) -> None:
        """A job starts on ``seq``: drafters with a per-schema scope (the grammar trace) switch to its schema."""
        for drafter in self.drafters:
            if isinstance(drafter, TraceCache) and drafter.name == "grammar":
                drafter.set_scope(seq, schema_key(schema))

    def propose(
        self, jobs: Sequence[tuple[int, Sequence[int], int]], carried: Sequence[int] | None = None
    ) -> list[Draft]:
        """``jobs``: ``(seq, tokens so far, room)`` of each generating sequence; one draft each (maybe empty).
        ``carried``: the tokens each sequence's call holds without a draft (1, its pending token, unless it
        computes confirmed ones again after a rollback)."""
        picks: list[tuple[str, list[int], float, dict[str, list[int]]]] = []
        for seq, tokens, room in jobs:
            best: tuple[str, list[int], float] = ("", [], 0.0)
            offers: dict[str, list[int]] = {}
            for drafter in self.drafters if room > 0 else ():
                proposal = offers[drafter.name] = drafter.propose(seq, tokens, min(room, self.k_max))
                a = self.tracker.get(seq, drafter.name)
                if proposal and expected_tokens(a, len(proposal)) > expected_tokens(best[2], len(best[1])):
                    best = (drafter.name, proposal, a)
            picks.append((*best, offers))
        if not any(p[1] for p in picks):
            return [Draft(offers=p[3]) for p in picks]
        if self.depth is not None:
            depths = [min(self.depth, len(p[1])) for p in picks]
        else:
            rollback_s = self.cost.rollback_s if self.recurrent else None
            depths = choose_depths([p[2] for p in picks], [len(p[1]) for p in picks], self._step_cost(len(picks)),
                                   base=carried, rollback_s=rollback_s)  # fmt: skip
        return [Draft(name, tuple(tokens[:k]), offers) if k else Draft(offers=offers)
                for (name, tokens, _, offers), k in zip(picks, depths, strict=True)]  # fmt: skip

    def _step_cost(self, seqs: int) -> Callable[[Sequence[float]], float]:
        """``T`` of a call over ``seqs`` sequences by the tokens each carries (``CallCost``), its draft part scaled
        by how much more (or less) than measured the drafted calls of this engine have cost, relative to its
        plain calls."""
        calls = self.call_cost
        base = calls.curve(seqs)(seqs)
        scale = self.draft_cost_scale

        def cost(lengths: Sequence[float]) -> float:
            return base + scale * (calls(lengths) - base)  # T(plain) + f (T(lengths) - T(plain))

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

    def observe_call(self, lengths: Sequence[int], seconds: float) -> None:
        """A decode call whose sequences carried ``lengths`` tokens took ``seconds``. Ignored until the cost
        table is there: it is measured when a draft is first on offer, not for calls that never had one."""
        if self._cost is None or not lengths:
            return
        ratio = seconds / max(1e-9, self.call_cost(lengths))
        drafted = sum(lengths) > len(lengths)
        old = self._calibration.get(drafted)
        self._calibration[drafted] = ratio if old is None else old + CALIBRATION_ALPHA * (ratio - old)

    def drafting(self, seqs: int = 1) -> bool:
        """Whether the next decode step over ``seqs`` sequences drafts at all: always with a fixed ``depth``,
        else as the speed gate says (plain while measured speculative steps over as many sequences have been
        slower than plain ones; see ``gate``)."""
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
            if isinstance(drafter, TraceCache):
                drafter.table.clear()
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
            if isinstance(drafter, TraceCache):
                try:
                    drafter.save()
                except OSError as exc:  # a full or read-only cache dir costs the learning, not the run
                    log.warning("could not save the speculator trace %s: %s", drafter.path, exc)

    def close(self) -> None:
        self.save(force=True)
        for drafter in self.drafters:
            close = getattr(drafter, "close", None)
            if close is not None:
                close()


def default_drafters(model_path: Any, *, persist: bool) -> list[Drafter]:
    """Context lookup, the trace cache of this model, and the per-schema (grammar) trace; the two traces are
    kept under ``cache_dir()/speculator`` when ``persist``."""
    if persist:
        trace = TraceCache.for_model(model_path)
        grammar = TraceCache.for_model(model_path, name="grammar", orders=(3, 2), span=8)
    else:
        trace, grammar = TraceCache(), TraceCache(name="grammar", orders=(3, 2), span=8)
    return [ContextLookup(), trace, grammar]
