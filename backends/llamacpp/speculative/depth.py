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
512-token contexts, ``measure_cost_table``) one sequence with 9 tokens takes 39 ms, 8 sequences with 1 token
each 39 ms, and 8 with 2 each 67 ms. So ``CostTable`` measures a curve per number of sequences, each over calls
in which every sequence carries the same number of tokens.

A call in which they carry different numbers is not a point on such a curve: llama.cpp runs a call over several
KV streams as ubatches in which every sequence present carries the same number of tokens (``split_equal``), so
sequences carrying 9, 1, 1, 1, 1, 1, 1 and 1 tokens run as 8 x 1 and then 1 x 8: 73 ms, where 16 tokens in 8 x 2
take 67 ms and 5, 3, 2 and five 1s (15 tokens) 95 ms, four passes over the weights. ``CallCost`` composes a call's
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
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minions.paths import cache_dir

if TYPE_CHECKING:
    from ..ffi import LlamaContext, LlamaModel, TokenBatch

__all__ = [
    "AcceptanceTracker",
    "CallCost",
    "CostCurve",
    "CostTable",
    "choose_depths",
    "expected_tokens",
    "load_or_measure_cost_table",
    "measure_cost_table",
]

log = logging.getLogger(__name__)

# The points of ``CostCurve.linear``.
MEASURE_POINTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)


def expected_tokens(a: float, k: int) -> float:
    """Tokens one step emits with a draft of ``k`` and per-token acceptance ``a``: ``sum_{i=0..k} a^i``."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


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
) -> list[int]:
    """Draft lengths ``k_i`` (0 included, at most ``caps[i]``, the length of the draft on offer) that maximise
    ``sum_i E(a_i, k_i) / T(b_1 + k_1, ..., b_s + k_s)``, where ``cost`` is ``T`` (seconds of a call whose
    sequences carry these many tokens: ``CallCost``) and ``b_i`` (``base``, 1 by default) the tokens sequence ``i``
    carries without a draft (its pending token and any it computes again); on recurrent memory (``rollback_s``:
    the seconds of one rollback) each sequence also carries ``R(a_i, k_i)`` and the call costs ``rollback_s
    sum_i (1 - a_i^k_i)`` more.

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
        rows = []
        for kk in range(cap + 1):
            redo, secs = (
                (0.0, 0.0) if rollback_s is None or kk == 0 else (rollback_tokens(a, kk), rollback_s * (1.0 - a**kk))
            )
            rows.append((expected_tokens(a, kk), b + kk + redo, secs))
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
    as (``split_equal``: every sequence present carries the same number of tokens): with the sequences' lengths
    sorted, ``l_1 <= ... <= l_s``, one ubatch per distinct length, of the ``s - i + 1`` sequences still carrying
    tokens, ``l_i - l_(i-1)`` each, costing ``T_(s-i+1)((s-i+1) (l_i - l_(i-1)))`` on the curve measured for
    that many sequences. Calls where every sequence carries the same number are points of the table itself."""

    def __init__(self, table: CostCurve | CostTable) -> None:
        self.table = table
        self._curves: dict[int, CostCurve] = {}

    def curve(self, seqs: int) -> CostCurve:
        """The table's curve for ``seqs`` sequences (interpolated once, then kept)."""
        curve = self._curves.get(seqs)
        if curve is None:
            curve = self._curves[seqs] = self.table.at(seqs)
        return curve

    def __call__(self, lengths: Sequence[float]) -> float:
        seconds = done = 0.0
        left = len(lengths)
        for n in sorted(lengths):
            if n > done:
                seconds += self.curve(left)(left * (n - done))
                done = n
            left -= 1
        return seconds


@dataclass
class AcceptanceTracker:
    """Per-token acceptance as an exponential moving average, per drafter and per sequence.

    A verified draft of length ``k`` with ``m`` accepted is ``m`` successes and, if ``m < k``, one failure (the
    positions after the first rejection were never tested). A sequence's estimate starts from its drafter's
    estimate over all sequences (which starts at ``prior``)."""

    alpha: float = 0.3
    prior: float = 0.5
    drafters: dict[str, float] = field(default_factory=dict)
    sequences: dict[tuple[int, str], float] = field(default_factory=dict)

    def get(self, seq: int, drafter: str) -> float:
        return self.sequences.get((seq, drafter), self.drafters.get(drafter, self.prior))

    def update(self, seq: int, drafter: str, k: int, m: int) -> None:
        outcomes = [1.0] * m + ([0.0] if m < k else [])
        self.sequences[(seq, drafter)] = self._ema(self.get(seq, drafter), outcomes)
        self.drafters[drafter] = self._ema(self.drafters.get(drafter, self.prior), outcomes)

    def _ema(self, a: float, outcomes: Sequence[float]) -> float:
        for x in outcomes:
            a += self.alpha * (x - a)  # a <- a + alpha (x - a)
        return a

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


# -- measuring T(seqs, n) ------------------------------------------------------------------------------------
# Tokens per sequence at which each curve is measured (1: plain decoding; 1 + k: a draft of k). A call whose
# sequences carry different numbers runs as several of these (``CallCost``).
PER_SEQ = (1, 2, 3, 4, 5, 7, 9, 13, 17)


def _shapes(seqs: int, n_batch: int) -> list[tuple[int, ...]]:
    """Tokens per sequence of each call measured for ``seqs`` sequences: every sequence the same."""
    return [(m,) * seqs for m in PER_SEQ if seqs * m <= n_batch]


def measure_cost_table(
    model: LlamaModel,
    *,
    n_threads: int,
    max_seqs: int,
    flash_attn: bool = False,
    context: int = 512,
    repeats: int = 5,
) -> CostTable:
    """``T`` for 1, 2, 4, ... up to ``max_seqs`` sequences, each after a ``context``-token prefix, with
    ``PER_SEQ`` tokens each and logits for every token (as a verify call
    reads them), in a context made as the engine makes its own; median of ``repeats`` calls. About 10-20 seconds
    for SmolLM2-135M on 2 cores. On recurrent memory, also the median seconds of one sequence's rollback
    (``CostTable.rollback_s``)."""
    from ..ffi import LlamaContext, TokenBatch

    counts = sorted({1, *(2**i for i in range(1, 8) if 2**i < max_seqs), max_seqs})
    n_max = max_seqs * max(PER_SEQ)
    n_batch = max(512, n_max)
    ctx = LlamaContext(model, seq_ctx=context + 256, n_seq_max=max_seqs, n_batch=n_batch,
                       n_threads=n_threads, flash_attn=flash_attn, n_outputs=n_max)  # fmt: skip
    batch = TokenBatch(model.lib, n_batch)
    rollbacks: list[float] | None = [] if model.memory != "attention" else None
    try:
        batch.clear()
        batch.add([(17 * i + 11) % model.n_vocab for i in range(context)], 0, 0, logits_last=True)
        ctx.decode(batch)
        for seq in range(1, max_seqs):
            ctx.seq_cp(0, seq, -1, -1)
        shapes = {s: _shapes(s, n_batch) for s in counts}
        sizes = [shape for s in counts for shape in shapes[s]]
        for shape in (sizes[0], sizes[-1]) * 3:  # the first calls build and repack; they take seconds
            _time_call(ctx, batch, shape, context, rollbacks)
        # rounds over all sizes, not all repeats of one size in a row: a burst of load from another process then
        # spreads over every size instead of inflating one; the median of each size's calls is kept
        times: dict[tuple[int, ...], list[float]] = {size: [] for size in sizes}
        for _ in range(repeats):
            for size in sizes:
                times[size].append(_time_call(ctx, batch, size, context, rollbacks))
    finally:
        ctx.close()
    curves = []
    for s in counts:
        points = [sum(shape) for shape in shapes[s]]
        seconds = [sorted(times[shape])[repeats // 2] for shape in shapes[s]]
        # a noisy machine can make T dip with n; the cost of more tokens is never less
        curves.append(CostCurve(tuple(points), tuple(max(seconds[: i + 1]) for i in range(len(seconds)))))
    rollback_s = sorted(rollbacks)[len(rollbacks) // 2] if rollbacks else 0.0
    return CostTable(tuple(counts), tuple(curves), rollback_s)


def _time_call(
    ctx: LlamaContext, batch: TokenBatch, per_seq: Sequence[int], at: int, rollbacks: list[float] | None = None
) -> float:
    """Seconds of one decode of ``per_seq[i]`` tokens in sequence ``i`` at positions ``at...``, logits for all;
    then undone. On recurrent memory (``rollbacks`` given) as a rejected draft is undone: each
    sequence's state saved before the call and restored after, the seconds per sequence appended to ``rollbacks``."""
    seqs = len(per_seq)
    saving = time.perf_counter()
    states = [ctx.recurrent_state(seq) for seq in range(seqs)] if rollbacks is not None else []
    saved = time.perf_counter() - saving
    batch.clear()
    for seq, m in enumerate(per_seq):
        batch.add([(31 * j + 7 + seq) % 1000 for j in range(m)], at, seq, logits_last=False)
    batch.want[: batch.n] = 1
    start = time.perf_counter()
    ctx.decode(batch)
    seconds = time.perf_counter() - start
    for seq, state in enumerate(states):
        ctx.restore_recurrent_state(seq, state)
    if rollbacks is not None:
        rollbacks.append((saved + time.perf_counter() - start - seconds) / seqs)
    for seq in range(seqs):
        ctx.seq_rm(seq, at, -1)  # on recurrent memory the state is at ``at - 1`` again: attention cells only
    return seconds


def _cost_path(model: LlamaModel, n_threads: int, max_seqs: int, flash_attn: bool) -> Path:
    st = model.path.stat()
    key = f"{model.path.stem}-{st.st_size}-t{n_threads}-s{max_seqs}{'-fa' if flash_attn else ''}"
    return cache_dir() / "speculator" / f"cost-v4-{key}.json"


def load_or_measure_cost_table(
    model: LlamaModel, *, n_threads: int, max_seqs: int, flash_attn: bool = False, refresh: bool = False
) -> CostTable:
    """The cost table of this model with this many threads and sequences, measured once and cached under the
    cache dir."""
    path = _cost_path(model, n_threads, max_seqs, flash_attn)
    if path.is_file() and not refresh:
        try:
            return CostTable.from_dict(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable cost table %s: %s", path, exc)
    log.info("measuring decode-call costs of %s (once for this machine; ~15 s)", model.path.name)
    table = measure_cost_table(model, n_threads=n_threads, max_seqs=max_seqs, flash_attn=flash_attn)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table.to_dict()))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError as exc:
        log.warning("could not cache the cost table at %s: %s", path, exc)
    log.info("measured T(n)/T(seqs) for %s: %s", model.path.name, table.ratios())
    return table
