"""This machine's cost table for the llama.cpp engine: ``T`` of a decode call by the sequences sharing it and the
tokens each carries (``speculation.depth.CostTable``), measured once per model, thread count and batch size and
cached under the cache dir."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from minions.paths import cache_dir

from ..model_files import model_file_key
from ..speculation.depth import CostCurve, CostTable, time_rounds
from .ffi import LlamaContext, LlamaModel, TokenBatch

__all__ = ["load_or_measure_cost_table", "measure_cost_table"]

log = logging.getLogger(__name__)

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
    ``PER_SEQ`` tokens each and logits for every token (as a verify call reads them), in a context made as the
    engine makes its own; median of ``repeats`` calls (``speculation.depth.time_rounds``). About 10-20 seconds
    for SmolLM2-135M on 2 cores. On recurrent memory, also the median seconds of one sequence's rollback
    (``CostTable.rollback_s``)."""
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
        times = time_rounds(sizes, lambda size: _time_call(ctx, batch, size, context, rollbacks), repeats=repeats)
    finally:
        ctx.close()
    curves = [CostCurve.measured([sum(shape) for shape in shapes[s]],
                                 [sorted(times[shape])[repeats // 2] for shape in shapes[s]])  # the median
              for s in counts]  # fmt: skip
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
    key = f"{model_file_key(model.path)}-t{n_threads}-s{max_seqs}{'-fa' if flash_attn else ''}"
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
