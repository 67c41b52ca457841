"""This machine's cost table for the llama.cpp engine: ``T`` of a decode call by the sequences sharing it and the
tokens each carries (``speculation.depth.CostTable``), measured once per model, thread count and batch size and
cached under the cache dir.

Measuring takes 10-20 s on an idle 2-core machine (minutes under load), and only speculation needs the table, so
no answer waits for it: until this machine's table is cached the engine drafts by ``DEFAULT_COST_TABLE``, and
measures in the llama.cpp thread's idle time, a call at a time (``cost_table_steps``, ``worker.when_idle``)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from minions.paths import cache_dir
from minions.steps import drain

from ..model_files import model_file_key
from ..speculation.depth import CostCurve, CostTable, timed_rounds
from .ffi import LlamaContext, LlamaModel, TokenBatch

__all__ = [
    "DEFAULT_COST_TABLE",
    "cost_table_steps",
    "load_cost_table",
    "load_or_measure_cost_table",
    "measure_cost_table",
    "save_cost_table",
]

log = logging.getLogger(__name__)

# Tokens per sequence at which each curve is measured (1: plain decoding; 1 + k: a draft of k). A call whose
# sequences carry different numbers runs as several of these (``CallCost``).
PER_SEQ = (1, 2, 3, 4, 5, 7, 9, 13, 17)


# The default table: SmolLM2-135M Q4_0 with 2 threads on this project's x86 machine, idle, as a line through the
# points measured there (one sequence: 7.8 ms for 1 token, 39 ms for 9; 8 sequences: 39 ms for 1 token each, 67 ms
# for 2 each; 13.2 ms for 2 sequences of 1): a fixed part by the number of sequences and 4 ms a token. A little
# steeper than measured, so it drafts a little less than a measured table would: T(9)/T(1) = 5.0 (measured
# 4.4-5.0), T(16)/T(8) = 1.8 (1.7). On more cores, on a bigger model (a step that reads more weights) or a GPU a
# verify token costs relatively less, and this table is conservative there too. Only its ratios matter, as long
# as nothing adds seconds of its own to a call's: with a draft model or on recurrent memory (a rollback's seconds)
# the engine measures the table on first speculative use instead (``Engine._speculator``).
_DEFAULT_FIXED_S = {1: 0.004, 2: 0.005, 4: 0.006, 8: 0.008}
_DEFAULT_PER_TOKEN_S = 0.004


def _default_cost_table() -> CostTable:
    curves = []
    for seqs, fixed in _DEFAULT_FIXED_S.items():
        tokens = tuple(seqs * m for m in PER_SEQ)
        curves.append(CostCurve(tokens, tuple(fixed + _DEFAULT_PER_TOKEN_S * n for n in tokens)))
    return CostTable(tuple(_DEFAULT_FIXED_S), tuple(curves))


DEFAULT_COST_TABLE = _default_cost_table()
"""The cost table the engine drafts by until this machine's is measured (see above)."""


def _shapes(seqs: int, n_batch: int) -> list[tuple[int, ...]]:
    """Tokens per sequence of each call measured for ``seqs`` sequences: every sequence the same."""
    return [(m,) * seqs for m in PER_SEQ if seqs * m <= n_batch]


def measure_cost_table(model: LlamaModel, **options: Any) -> CostTable:
    """``cost_table_steps`` (its options) at once: about 10-20 seconds for SmolLM2-135M on 2 idle cores."""
    return drain(cost_table_steps(model, **options))


def cost_table_steps(
    model: LlamaModel,
    *,
    n_threads: int,
    max_seqs: int,
    flash_attn: bool = False,
    context: int = 512,
    repeats: int = 5,
) -> Generator[None, None, CostTable]:
    """``T`` for 1, 2, 4, ... up to ``max_seqs`` sequences, each after a ``context``-token prefix, with
    ``PER_SEQ`` tokens each and logits for every token (as a verify call reads them), in a context made as the
    engine makes its own; median of ``repeats`` calls (``speculation.depth.timed_rounds``). On recurrent memory,
    also the median seconds of one sequence's rollback (``CostTable.rollback_s``). A decode call at a time: it
    yields after each timed call (the llama.cpp thread runs a job that comes between two) and returns the table;
    closed early, it frees its context."""
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
        times = yield from timed_rounds(sizes, lambda size: _time_call(ctx, batch, size, context, rollbacks),
                                        repeats=repeats)  # fmt: skip
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


def load_cost_table(model: LlamaModel, *, n_threads: int, max_seqs: int, flash_attn: bool = False) -> CostTable | None:
    """This machine's cost table of this model with this many threads and sequences, where measured and cached
    before; else None."""
    path = _cost_path(model, n_threads, max_seqs, flash_attn)
    if not path.is_file():
        return None
    try:
        return CostTable.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError, OSError) as exc:
        log.warning("ignoring unreadable cost table %s: %s", path, exc)
        return None


def save_cost_table(
    model: LlamaModel, table: CostTable, *, n_threads: int, max_seqs: int, flash_attn: bool = False
) -> None:
    """Cache ``table`` for ``load_cost_table`` (a cache dir that cannot be written costs a warning)."""
    path = _cost_path(model, n_threads, max_seqs, flash_attn)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table.to_dict()))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError as exc:
        log.warning("could not cache the cost table at %s: %s", path, exc)
    log.info("cached T(n)/T(seqs) of %s: %s", model.path.name, table.ratios())


def load_or_measure_cost_table(
    model: LlamaModel, *, n_threads: int, max_seqs: int, flash_attn: bool = False, refresh: bool = False
) -> CostTable:
    """The cost table of this model with this many threads and sequences, measured now unless cached (or
    ``refresh``), and cached."""
    table = None if refresh else load_cost_table(model, n_threads=n_threads, max_seqs=max_seqs, flash_attn=flash_attn)
    if table is None:
        log.info("measuring decode-call costs of %s (once for this machine; ~15 s)", model.path.name)
        table = measure_cost_table(model, n_threads=n_threads, max_seqs=max_seqs, flash_attn=flash_attn)
        save_cost_table(model, table, n_threads=n_threads, max_seqs=max_seqs, flash_attn=flash_attn)
    return table
