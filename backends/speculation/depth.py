"""How much to draft: the machine's cost table, the drafts' live acceptance, and the choice between them.

A verify call over ``n`` tokens is not free on a CPU (SmolLM2-135M Q4_0 on 2 cores: ``T(4)/T(1) ~ 1.75``), so a
draft pays only when the tokens it is expected to add outweigh the extra time of the call. With per-token
acceptance ``a`` (the chance that a draft token is accepted given the ones before it were), a draft of ``k``
tokens emits ``1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)`` tokens per step (the ``1`` is the token the
target emits anyway). A batch of sequences shares one call: with draft lengths ``k_i`` it costs
``T(1 + k_1, ..., 1 + k_s)`` (below) and emits ``sum_i E(a_i, k_i)`` tokens; ``choose_depths`` maximises that
ratio, and ``k_i = 0`` everywhere (plain decoding) is always a candidate, so by the model's own estimate
speculation never makes a step slower.

``T`` depends on how many sequences share the call, not only on its tokens: each sequence has its own KV
stream, so its queries attend in their own small products. On this project's 2-core machine (SmolLM2-135M Q4_0,
512-token contexts, ``backends.llamacpp.cost_table.measure_cost_table``) one sequence with 9 tokens takes
39 ms, 8 sequences with 1 token each 39 ms, and 8 with 2 each 67 ms. So ``CostTable`` measures a curve per
number of sequences, each over calls in which every sequence carries the same number of tokens.

A call in which they carry different numbers is not a point on such a curve: llama.cpp runs a call over several
KV streams as ubatches in which every sequence present carries the same number of tokens (``split_equal``), so
sequences carrying 9, 1, 1, 1, 1, 1, 1 and 1 tokens run as 8 x 1 and then 1 x 8: 73 ms, where 16 tokens in 8 x 2
take 67 ms and 5, 3, 2 and five 1s (15 tokens) 95 ms, four passes over the weights. A ubatch holds only
sequences with consecutive ids, so lengths that rise and fall along the ids, and sequences missing between
others (jobs that have ended), split a call further. ``CallCost`` composes a call's
cost from those ubatches, and ``choose_depths`` weighs each draft by it: at 8 sequences a draft for one or two of
them costs a pass of its own, and pays only as long as what it adds outweighs that (even drafts for all of them
share one).

On recurrent and hybrid models a rejected draft costs more than its verify tokens: the recurrent state cannot drop
the rejected tokens, so the sequence goes back to a checkpoint taken before the call (``T_r`` seconds to save and
restore, ``CostTable.rollback_s``) and computes its accepted tokens again in its next call. With ``m`` of ``k``
accepted (``m < k``, probability ``a^m (1 - a)``) that is ``1 + m`` more tokens, so a draft of ``k`` adds
``R(a, k) = sum_{m<k} a^m (1 - a) (1 + m)`` tokens on average and ``T_r`` with probability ``1 - a^k``;
``choose_depths`` charges both, so there too a draft is chosen only where it is expected to pay.

"Expected to pay" means by ``MIN_GAIN`` at least: the table was measured once, on an idle machine, at one
context length, and it does not see what a speculative step does besides the call (drafting, verifying,
rolling back). Where the model's gain is a few percent (a batch of 8 on a 2-core CPU, whose call costs nearly
in proportion to its tokens: ``T(16)/T(8) ~ 1.75``) those errors decide, and they were losses: extraction at
batch 8 on a tiny copying LFM2 0.86x-0.99x of plain decoding while the model promised a gain. A step drafts
only where the whole step is expected to be ``MIN_GAIN`` faster than plain decoding.

Token trees (the PyTorch backend, where a verify forward over many tokens costs little more than over one) are
shaped by the same objective, expected tokens per second (``best_size``). ``Acceptance`` measures how often a
drafted node at depth ``d`` whose parent was accepted was itself accepted, by its rank ``r`` among its
siblings: ``p[d][r]`` (``Calibration`` the same for a draft model's nodes, by rank and draft probability);
``shape_tree`` is Sequoia's tree choice: under that positional model a tree's expected accepted length is the
sum over its nodes of the product of ``p`` along their path. That product shrinks from parent to child and from
a rank to the next, so for every size ``n`` the best tree is the ``n`` nodes with the largest products, taken
best first (the optimum of Sequoia's dynamic program for a given budget); the size is the one that maximizes
``(1 + E[accepted](n)) / T(1 + n)``. Nodes come from the context trie (``drafters.ContextIndex.drafts``), so a
tree never holds a node with nothing drafted behind it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from minions.steps import drain

from .tree import STRONG_MATCH, TokenTree, Trie, tried

__all__ = [
    "Acceptance",
    "AcceptanceTracker",
    "Calibration",
    "CallCost",
    "CostCurve",
    "CostTable",
    "NodeCounts",
    "best_first",
    "best_size",
    "choose_depths",
    "expected_tokens",
    "fillers",
    "rollback_tokens",
    "shape_tree",
    "time_rounds",
    "timed_rounds",
]

Shape = TypeVar("Shape", bound=Hashable)

# The points of ``CostCurve.linear``.
MEASURE_POINTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)


def expected_tokens(a: float, k: int, outcomes: float = math.inf) -> float:
    """Tokens one step emits with a draft of ``k`` and per-token acceptance ``a``: ``sum_{i=0..k} a^i``.

    ``outcomes``: what the estimate ``a`` is worth (the outcomes it counts, its prior's weight included). A
    rate estimated from few outcomes may be well above or below ``a``, and a long draft gains more where it is
    above than it loses where it is below (``a^i`` is convex), so the expected tokens are the mean of ``a^i``
    over the Beta belief with that mean and weight: ``E[a^i] = prod_{j<i} (a n + j) / (n + j)``. A draft model
    right 91% of the time was estimated 0.73-0.85 by its latest steps, and its drafts cut to 3 tokens by the
    point estimate, where 8 were worth 24% more a step."""
    if a >= 1.0:
        return float(k + 1)
    if math.isinf(outcomes):
        return (1.0 - a ** (k + 1)) / (1.0 - a)
    alpha, total, term = a * outcomes, 1.0, 1.0
    for j in range(k):
        term *= (alpha + j) / (outcomes + j)
        total += term
    return total


@dataclass(frozen=True, slots=True)
class CostCurve:
    """Seconds of one decode call over ``n`` tokens, measured at ``points`` and interpolated between them."""

    points: tuple[int, ...]
    seconds: tuple[float, ...]
    rollback_s: float = 0.0
    """Recurrent memory: seconds to save a sequence's recurrent state before a call and restore it after."""

    def __call__(self, n: float) -> float:
        i = bisect.bisect_left(self.points, n)
        if i < len(self.points) and self.points[i] == n:
            return self.seconds[i]
        if i == 0:
            return self.seconds[0]
        if i == len(self.points):  # beyond the last point: extend the last segment's slope
            i -= 1
        x0, x1, y0, y1 = self.points[i - 1], self.points[i], self.seconds[i - 1], self.seconds[i]
        return y0 + (y1 - y0) * (n - x0) / (x1 - x0)

    def ratios(self) -> dict[int, float]:
        """``T(n) / T(first point)``: what the benchmark reports."""
        return {n: round(s / self.seconds[0], 3) for n, s in zip(self.points, self.seconds, strict=True)}

    def at(self, seqs: int) -> CostCurve:
        """A single curve is taken to hold for any number of sequences (tests, and an unmeasured machine)."""
        return self

    def to_dict(self) -> dict[str, list[float] | list[int]]:
        return {"points": list(self.points), "seconds": list(self.seconds)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Sequence[float]]) -> CostCurve:
        return cls(tuple(int(p) for p in d["points"]), tuple(float(s) for s in d["seconds"]))

    @classmethod
    def measured(cls, points: Sequence[int], seconds: Sequence[float]) -> CostCurve:
        """The curve of measured ``seconds`` at ``points`` (ascending), each at least the one before: a noisy
        machine can make ``T`` dip with ``n``, but the cost of more tokens is never less."""
        return cls(tuple(points), tuple(max(seconds[: i + 1]) for i in range(len(seconds))))

    @classmethod
    def linear(cls, per_token: float, base: float = 1.0) -> CostCurve:
        """``T(n) = base + per_token * (n - 1)``, for tests and for a machine not measured yet."""
        return cls(MEASURE_POINTS, tuple(base + per_token * (n - 1) for n in MEASURE_POINTS))


def rollback_tokens(a: float, k: int) -> float:
    """Recurrent memory: tokens a draft of ``k`` makes the next call compute again, on average: ``1 + m`` when
    ``m < k`` are accepted (the pending token and the accepted ones), which happens with probability
    ``a^m (1 - a)``. In closed form: ``sum_{m<k} a^m (1 - a) (1 + m) = 1 - a^k + a (1 - k a^(k-1) + (k-1) a^k)
    / (1 - a)``."""
    if k <= 0 or a >= 1.0:
        return 0.0
    return 1.0 - a**k + a * (1.0 - k * a ** (k - 1) + (k - 1) * a**k) / (1.0 - a)


MIN_GAIN = 0.05
"""Drafting must be expected to make a step this much faster than plain decoding (see the module's docstring)."""


def choose_depths(
    acceptance: Sequence[float],
    caps: Sequence[int],
    cost: Callable[[Sequence[float]], float],
    *,
    base: Sequence[int] | None = None,
    rollback_s: float | None = None,
    min_gain: float = MIN_GAIN,
    outcomes: Sequence[float] | None = None,
) -> list[int]:
    """Draft lengths ``k_i`` (0 included, at most ``caps[i]``, the length of the draft on offer) that maximise
    ``sum_i E(a_i, k_i) / T(b_1 + k_1, ..., b_s + k_s)``, where ``cost`` is ``T`` (seconds of a call whose
    sequences carry these many tokens: ``CallCost``) and ``b_i`` (``base``, 1 by default) the tokens sequence ``i``
    carries without a draft (its pending token and any it computes again); on recurrent memory (``rollback_s``:
    the seconds of one rollback) each sequence also carries ``R(a_i, k_i)`` and the call costs ``rollback_s
    sum_i (1 - a_i^k_i)`` more. ``outcomes``: what each estimate is worth (``expected_tokens``); None: exact.

    Coordinate ascent: from the best of plain decoding and every even draft (each sequence ``min(d, caps[i])``:
    at 8 sequences a lone draft costs a pass of its own, and only drafts for many of them together may pay), each
    round sets the one sequence's length whose change raises the ratio most (any length, not just one more
    token: the measured curve has steps, where one more token does not pay but three do); it stops when no
    change raises it. The result is plain decoding unless it beats it by ``min_gain``, so it is never worse than
    plain decoding under the model, and close calls go to plain decoding. It runs at every decode step, so what
    each length gives (tokens, tokens in the call, rollback seconds) is worked out once per sequence, not in
    every round."""
    # per sequence and length kk: expected tokens emitted, tokens it carries in the call (b + kk + expected
    # redone), seconds of expected rollback
    gains = []
    for i, (a, cap) in enumerate(zip(acceptance, caps, strict=True)):
        b = 1.0 if base is None else float(base[i])
        worth = math.inf if outcomes is None else outcomes[i]
        rows = []
        for kk in range(cap + 1):
            redo, secs = (
                (0.0, 0.0) if rollback_s is None or kk == 0 else (rollback_tokens(a, kk), rollback_s * (1.0 - a**kk))
            )
            rows.append((expected_tokens(a, kk, worth), b + kk + redo, secs))
        gains.append(rows)

    def rate(k: Sequence[int]) -> float:
        picked = [rows[kk] for rows, kk in zip(gains, k, strict=True)]
        return sum(r[0] for r in picked) / (cost([r[1] for r in picked]) + sum(r[2] for r in picked))

    if not gains:
        return []
    k = [0] * len(gains)
    best = plain = rate(k)
    for d in range(1, max(caps) + 1):
        even = [min(d, cap) for cap in caps]
        r = rate(even)
        if r > best:
            k, best = even, r
    tokens = sum(rows[kk][0] for rows, kk in zip(gains, k, strict=True))
    lengths = [rows[kk][1] for rows, kk in zip(gains, k, strict=True)]
    extra = sum(rows[kk][2] for rows, kk in zip(gains, k, strict=True))
    while True:
        pick, pick_k, pick_rate = -1, 0, best * (1 + 1e-9)
        for i, rows in enumerate(gains):
            e0, n0, s0 = rows[k[i]]
            base_tokens, base_extra = tokens - e0, extra - s0
            for kk, (e, nn, secs) in enumerate(rows):
                if kk == k[i]:
                    continue
                lengths[i] = nn
                r = (base_tokens + e) / (cost(lengths) + base_extra + secs)
                if r > pick_rate:
                    pick, pick_k, pick_rate = i, kk, r
            lengths[i] = n0
        if pick < 0:
            return k if best >= plain * (1.0 + min_gain) else [0] * len(k)
        (e0, _, s0), (e1, n1, s1) = gains[pick][k[pick]], gains[pick][pick_k]
        tokens += e1 - e0
        extra += s1 - s0
        lengths[pick] = n1
        k[pick], best = pick_k, pick_rate


class CallCost:
    """``T`` of a call by the tokens each of its sequences carries, composed from the ubatches llama.cpp runs it
    as. With a KV stream per sequence llama.cpp splits a call with ``split_equal`` in its sequential mode: a
    ubatch is a run of sequences with consecutive ids (in the call's order) that still have tokens, from the first
    such sequence, each carrying as many tokens as the one with the fewest left; then the next. A ubatch of ``s``
    sequences and ``n`` tokens each costs ``T_s(s n)`` on the curve measured for that many sequences, so calls
    where every sequence carries the same number are points of the table itself. Lengths that do not fall with
    the ids split more: measured on the 1B target at 8 sequences, 3, 1, 3, 1, ... tokens (five passes) took 1036
    ms where 3, 3, 3, 3, 1, 1, 1, 1 (two) took 609 and 8 x 3 555; and sequences 0, 2, 3, 5 and 7 with a token each
    (four passes) 524 ms where 0 to 4 took 244.

    Lengths may be expected values (a recurrent model's tokens computed again, ``rollback_tokens``): a ubatch
    of a fraction ``x < 1`` of a token a sequence costs ``x`` times a ubatch of one token each, so that the cost is
    continuous in them (else lengths apart by a hundredth would each cost a pass of their own)."""

    def __init__(self, table: CostCurve | CostTable) -> None:
        self.table = table
        self._curves: dict[int, CostCurve] = {}

    def curve(self, seqs: int) -> CostCurve:
        """The table's curve for ``seqs`` sequences (interpolated once, then kept)."""
        curve = self._curves.get(seqs)
        if curve is None:
            curve = self._curves[seqs] = self.table.at(seqs)
        return curve

    def __call__(self, lengths: Sequence[float], seqs: Sequence[int] | None = None) -> float:
        """Seconds of a call whose sequences carry ``lengths`` tokens; ``seqs``: their ids, in the call's order
        (consecutive where None). Where the engine fills the gaps between them (``fillers``), one ubatch over
        them all."""
        if seqs is not None and (gaps := fillers(lengths, seqs)):
            return self.curve(len(seqs) + len(gaps))((len(seqs) + len(gaps)) * lengths[0])
        ids = range(len(lengths)) if seqs is None else seqs
        left = [float(n) for n in lengths]
        seconds = 0.0
        while True:
            run: list[int] = []
            for i, n in enumerate(left):
                if n <= 1e-9:
                    continue
                if run and ids[i] != ids[run[-1]] + 1:
                    break
                run.append(i)
            if not run:
                return seconds
            step = min(left[i] for i in run)
            curve = self.curve(len(run))
            seconds += curve(len(run) * step) if step >= 1.0 else step * curve(len(run))
            for i in run:
                left[i] -= step


def fillers(lengths: Sequence[float], seqs: Sequence[int]) -> list[int]:
    """The ids missing between a call's sequences (``seqs``, in the call's order) that the engine fills, each with
    as many tokens as the others carry and nothing kept, so that llama.cpp runs the call as one ubatch, not one a
    run of consecutive ids: where every sequence carries the same whole number of tokens, the ids ascend, and the
    missing ones are no more than those present (a filler costs a sequence's share of a pass, a split a pass of
    its own). A job that ends before the others of a batch leaves such a gap: measured on the 1B target, one token
    each on sequences 0, 2, 3, 5 and 7 took 524 ms where 0 to 4 took 244 and 0 to 7 258. Else none."""
    if len(seqs) < 2 or any(n != lengths[0] for n in lengths) or lengths[0] < 1 or lengths[0] % 1:
        return []
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        return []
    gaps = [i for a, b in itertools.pairwise(seqs) for i in range(a + 1, b)]
    return gaps if len(gaps) <= len(seqs) else []


@dataclass
class AcceptanceTracker:
    """Per-token acceptance, per drafter and per sequence: accepted tokens over tested ones, both counted with
    the older steps' counts decayed.

    A verified draft of length ``k`` with ``m`` accepted is ``m`` successes and, if ``m < k``, one failure (the
    positions after the first rejection were never tested). Each update first multiplies the counts by
    ``decay`` once for every outcome it adds; the estimate is ``(successes + prior w) / (outcomes + w)``, ``w`` =
    ``weight``. A sequence's counts start from its drafter's over all sequences (which start at none: the estimate
    is ``prior``).

    Decayed by outcome, not by update: the estimate then remembers about ``1 / (1 - decay)`` tested tokens
    whatever the drafts' lengths. Decayed by update (0.8 an update), it remembered five drafts, about 40 tokens of
    drafts of 8 but 5 of drafts of 1, where the prior's weight pulled a draft model right 95% of the time down
    to 0.70-0.88 (SmolLM2 for the 1B target at batch 8): its drafts were cut to 1 token because the estimate was
    low, and the estimate stayed low because the drafts were short.

    Counts, not a moving average over the outcomes in order: a step's failure comes after its successes, so an
    average that weighs the latest outcome most was at its lowest whenever the next step asked (with weight
    0.3, a draft model that agreed with its target on 91% of tokens was estimated 0.6-0.7 and its drafts cut
    short)."""

    decay: float = 0.97
    """Per outcome (0.97^8 ~ 0.78: a draft of 8 decays the counts as one update did at 0.8)."""
    prior: float = 0.5
    weight: float = 2.0
    drafters: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Each drafter's (successes, outcomes) over all sequences."""
    sequences: dict[tuple[int, str], tuple[float, float]] = field(default_factory=dict)

    def get(self, seq: int, drafter: str) -> float:
        s, n = self.sequences.get((seq, drafter)) or self.drafters.get(drafter) or (0.0, 0.0)
        return (s + self.prior * self.weight) / (n + self.weight)

    def outcomes(self, seq: int, drafter: str) -> float:
        """What the estimate ``get`` is worth: the (decayed) outcomes it counts and the prior's weight."""
        _, n = self.sequences.get((seq, drafter)) or self.drafters.get(drafter) or (0.0, 0.0)
        return n + self.weight

    def set(self, drafter: str, a: float, outcomes: float = 20.0) -> None:
        """Start ``drafter``'s estimate at ``a``, as if from ``outcomes`` outcomes (tests, benches)."""
        self.drafters[drafter] = (a * (outcomes + self.weight) - self.prior * self.weight, outcomes)

    def update(self, seq: int, drafter: str, k: int, m: int) -> None:
        failed = 1.0 if m < k else 0.0
        decay = self.decay ** (m + failed)
        s, n = self.sequences.get((seq, drafter)) or self.drafters.get(drafter) or (0.0, 0.0)
        self.sequences[(seq, drafter)] = (decay * s + m, decay * n + m + failed)
        s, n = self.drafters.get(drafter, (0.0, 0.0))
        self.drafters[drafter] = (decay * s + m, decay * n + m + failed)

    def observe(self, seq: int, drafter: str, draft: Sequence[int], emitted: Sequence[int]) -> None:
        """Score a proposal against the tokens a step emitted, whether or not it was verified: a draft token
        would have been accepted exactly when it equals the emitted token at its place (greedy, and
        sample-and-compare alike). Free, so a drafter left out (depth 0) keeps an estimate and can come back."""
        n = min(len(draft), len(emitted))
        m = 0
        while m < n and draft[m] == emitted[m]:
            m += 1
        if n:
            self.update(seq, drafter, n, m)

    def forget(self, seq: int) -> None:
        """A sequence ended: its estimates go (its drafters' keep what it taught them)."""
        for key in [key for key in self.sequences if key[0] == seq]:
            del self.sequences[key]


@dataclass(frozen=True, slots=True)
class CostTable:
    """``T`` by the number of sequences in the call: ``curves[i]`` is the curve over the call's total tokens
    when ``seqs[i]`` sequences share it; between two measured counts, linear interpolation."""

    seqs: tuple[int, ...]
    curves: tuple[CostCurve, ...]
    rollback_s: float = 0.0
    """Recurrent memory: seconds to save a sequence's recurrent state before a call and restore it after."""

    def at(self, seqs: int) -> CostCurve:
        """The curve for a call shared by ``seqs`` sequences (over the points of the nearest measured ones)."""
        i = bisect.bisect_left(self.seqs, seqs)
        if i < len(self.seqs) and self.seqs[i] == seqs:
            return self.curves[i]
        if i == 0 or i == len(self.seqs):
            return self.curves[min(i, len(self.seqs) - 1)]
        s0, s1, c0, c1 = self.seqs[i - 1], self.seqs[i], self.curves[i - 1], self.curves[i]
        w = (seqs - s0) / (s1 - s0)
        points = tuple(sorted({*c0.points, *c1.points}))
        return CostCurve(points, tuple((1 - w) * c0(n) + w * c1(n) for n in points))

    def ratios(self) -> dict[str, dict[int, float]]:
        """Each curve's ``T(n) / T(n_seqs)`` (the cost of a step relative to plain decoding of those sequences)."""
        return {f"seqs={s}": c.ratios() for s, c in zip(self.seqs, self.curves, strict=True)}

    def to_dict(self) -> dict[str, Any]:
        return {"seqs": list(self.seqs), "curves": [c.to_dict() for c in self.curves], "rollback_s": self.rollback_s}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CostTable:
        curves = tuple(CostCurve.from_dict(c) for c in d["curves"])
        return cls(tuple(int(s) for s in d["seqs"]), curves, float(d.get("rollback_s", 0.0)))


def time_rounds(
    shapes: Sequence[Shape], call: Callable[[Shape], float], *, repeats: int, warmup: int = 1
) -> dict[Shape, list[float]]:
    """``repeats`` timings of ``call(shape)`` (it returns the seconds it measured) for every shape, timed in rounds
    over all shapes, not all repeats of one shape in a row: a burst of other work on the machine then slows one
    call of several shapes, not every call of one shape (which the monotone repair of ``CostCurve.measured``
    would carry to every larger one). The first ``warmup`` rounds are not kept: the first calls of a shape build
    and repack buffers, and take seconds."""
    return drain(timed_rounds(shapes, call, repeats=repeats, warmup=warmup))


def timed_rounds(
    shapes: Sequence[Shape], call: Callable[[Shape], float], *, repeats: int, warmup: int = 1
) -> Generator[None, None, dict[Shape, list[float]]]:
    """``time_rounds`` a call at a time: it yields after each call (a caller with other work does it between two,
    and the rounds absorb what that work disturbs) and returns the timings."""
    times: dict[Shape, list[float]] = {shape: [] for shape in shapes}
    for round_ in range(warmup + repeats):
        for shape in shapes:
            seconds = call(shape)
            if round_ >= warmup:
                times[shape].append(seconds)
            yield
    return times


# -- token trees: the same objective, over trees -------------------------------------------------------------
def best_size(values: Sequence[float], cost: Callable[[int], float], spent: float = 0.0) -> int:
    """The objective every draft shape here maximizes, expected tokens per step over its seconds: with nodes
    best first, each with ``values[i]`` the chance that it is accepted (its path's product), the tree of the
    first ``n - 1`` of them emits ``1 + sum(values[:n - 1])`` tokens on average in ``spent + cost(n)`` seconds
    (``spent``: drafting time already paid). Returns the best ``n`` (1: the root alone, plain decoding).
    ``choose_depths`` maximizes the same ratio over a batch of chains."""
    best_n, best_rate, gain = 1, 1.0 / (spent + cost(1)), 0.0
    for n, value in enumerate(values, 2):
        gain += value
        rate = (1.0 + gain) / (spent + cost(n))
        if rate > best_rate:
            best_n, best_rate = n, rate
    return best_n


class NodeCounts:
    """Accepted / tried drafted nodes, counted in the cells of a grid over verify steps (every node whose parent
    was accepted was tried: ``tree.tried``), each cell's rate shrunk toward a prior worth ``PRIOR_TRIES`` tries,
    so a few measured steps move it and many measured ones decide it."""

    PRIOR_TRIES = 4

    def __init__(self, rows: int, cols: int) -> None:
        self.tried = [[0] * cols for _ in range(rows)]
        self.accepted = [[0] * cols for _ in range(rows)]

    def count(self, tree: TokenTree, path: Sequence[int], cell: Callable[[int], tuple[int, int] | None]) -> None:
        """Count one verify step; ``cell(node)``: where a node counts (None: nowhere)."""
        for node, accepted in tried(tree, path):
            where = cell(node)
            if where is not None:
                r, c = where
                self.tried[r][c] += 1
                self.accepted[r][c] += accepted

    def rate(self, r: int, c: int, prior: float) -> float:
        return (self.accepted[r][c] + self.PRIOR_TRIES * prior) / (self.tried[r][c] + self.PRIOR_TRIES)


class Acceptance(NodeCounts):
    """Acceptance of a drafted node by its depth (1 = a child of the root) and rank among its siblings (0 = best
    supported): ``p[d][r]``, for trees drafted from the job's text."""

    def __init__(self, max_depth: int, max_rank: int, prior: Callable[[int, int], float] | None = None) -> None:
        super().__init__(max_depth + 1, max_rank)
        self.max_depth, self.max_rank = max_depth, max_rank
        half = max_rank // 2
        # the guess before anything is measured; ranks from ``half`` on are one-token matches' (shape_tree), a
        # guess high enough that they get tried, and so measured
        self._prior = prior or (lambda d, r: 0.6 / (1 + 2 * r) if r < half else 0.35 / (1 + 2 * (r - half)))

    def p(self, depth: int, rank: int) -> float:
        d, r = min(depth, self.max_depth), min(rank, self.max_rank - 1)
        return self.rate(d, r, self._prior(d, r))

    def record(self, tree: TokenTree, ranks: Sequence[int], path: Sequence[int]) -> None:
        depths = tree.depths()
        self.count(tree, path, lambda i: (min(depths[i], self.max_depth), min(ranks[i], self.max_rank - 1)))

    def table(self) -> dict[int, list[float]]:
        """``{depth: [p by rank]}`` for the depths tried at all (what benches print)."""
        return {d: [round(self.p(d, r), 3) for r in range(self.max_rank)]
                for d in range(1, self.max_depth + 1) if sum(self.tried[d])}  # fmt: skip


class Calibration(NodeCounts):
    """How often the target walked into a drafted node whose parent it walked into, by the node's rank among
    a draft model's choices at its position and its draft probability. A draft that is the target's own
    quantized copy is right far more often than its probabilities say (it agrees on the most likely token even
    where it is unsure), and a sibling far less often; the tree values nodes by what was measured."""

    BUCKETS = 5
    RANKS = 3

    def __init__(self) -> None:
        super().__init__(self.RANKS, self.BUCKETS)

    def _cell(self, rank: int, p: float) -> tuple[int, int]:
        return min(rank, self.RANKS - 1), min(int(p * self.BUCKETS), self.BUCKETS - 1)

    def value(self, rank: int, p: float) -> float:
        """The chance the target takes the node, given that it took its parent: the node's cell, shrunk toward
        its rank's rate over all probabilities, shrunk in turn toward the draft's ``p``, so a cell seldom seen
        borrows from its rank rather than trusting the draft."""
        r, b = self._cell(rank, p)
        pooled = (sum(self.accepted[r]) + self.PRIOR_TRIES * p) / (sum(self.tried[r]) + self.PRIOR_TRIES)
        return self.rate(r, b, pooled)

    def record(self, tree: TokenTree, ranks: Sequence[int], probs: Sequence[float], path: Sequence[int]) -> None:
        """Count one verify step (forced tokens, of probability 1, aside)."""
        self.count(tree, path, lambda i: self._cell(ranks[i], probs[i]) if probs[i] < 1.0 else None)

    def table(self) -> dict[int, list[float]]:
        """``{rank: [value at each bucket's middle]}`` (what benches print)."""
        return {r: [round(self.value(r, (b + 0.5) / self.BUCKETS), 3) for b in range(self.BUCKETS)]
                for r in range(self.RANKS)}  # fmt: skip


def shape_tree(
    root: int, trie: Trie, acceptance: Acceptance, cost: CostCurve, *, max_nodes: int, width: int
) -> tuple[TokenTree, list[int], float]:
    """The tree to verify: the best-first drafted nodes, as many as pay for their cost.

    Returns the tree, each node's rank among its siblings (0 for the root) and the expected number of
    accepted drafts. ``width`` bounds the children per node (1: chain speculation).
    """
    # best first by path probability: (-prob, order, depth, rank, parent node, token, subtrie)
    heap: list[tuple[float, int, int, int, int, int, Trie]] = []
    order = 0

    def offer(parent: int, depth: int, prob: float, sub: Trie) -> None:
        nonlocal order
        for i, (token, match, child) in enumerate(sub.ranked()[:width]):
            rank = i if match >= STRONG_MATCH else width + i  # drafts from one-token matches are counted apart
            q = prob * acceptance.p(depth, rank)
            heapq.heappush(heap, (-q, order, depth, rank, parent, token, child))
            order += 1

    offer(0, 1, 1.0, trie)
    tokens, parents, ranks, probs = [root], [-1], [0], [1.0]
    while heap and len(tokens) <= max_nodes:
        neg_q, _, depth, rank, parent, token, child = heapq.heappop(heap)
        tokens.append(token)
        parents.append(parent)
        ranks.append(rank)
        probs.append(-neg_q)
        offer(len(tokens) - 1, depth + 1, -neg_q, child)
    best_n = best_size(probs[1:], cost)  # best-first order makes every prefix a tree
    tree = TokenTree(tuple(tokens[:best_n]), tuple(parents[:best_n]))
    return tree, ranks[:best_n], sum(probs[1:best_n])


def best_first(
    tokens: Sequence[int],
    parents: Sequence[int],
    values: Sequence[float],
    cost: Callable[[int], float],
    spent: float,
    *,
    max_nodes: int | None = None,
) -> tuple[TokenTree, list[int]]:
    """The subtree of the ``n`` most valued nodes (node 0, the root, always; at most ``max_nodes`` others) that
    maximizes expected tokens per second (``best_size``, with ``spent`` seconds of drafting); also each kept
    node's old index.

    A child's value never exceeds its parent's, so ordering by value (ties: the earlier node) puts parents first
    and every prefix of the order is a tree.
    """
    order = [0, *sorted(range(1, len(tokens)), key=lambda i: (-values[i], i))][: (max_nodes or len(tokens)) + 1]
    kept = order[: best_size([values[i] for i in order[1:]], cost, spent)]
    new = {old: i for i, old in enumerate(kept)}
    tree = TokenTree(tuple(tokens[i] for i in kept), tuple(new[parents[i]] if i else -1 for i in kept))
    return tree, kept
