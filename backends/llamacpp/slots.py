"""The engine's sequences: one KV stream each, holding the tokens of one prompt (and its reply while it runs).

The batched context keeps one KV stream per sequence (``kv_unified=False``). That costs memory (every stream
has room for ``seq_ctx`` tokens) but buys exactness: a stream's cells sit at indices equal to their positions,
as in a context of one sequence, so attention sums in the same order and a batched job computes bit for bit
what it computes alone. (In a unified pool a sequence's cells land wherever cells are free, the SIMD lanes of
the attention sums shift with them, and greedy replies drift from the one-at-a-time replies.)

A ``Slot`` mirrors one stream: ``tokens[i]`` is the token whose keys and values are at position ``i``. The
operations the engine needs, with what they cost:

- keep a prefix: ``seq_rm(seq, n, -1)``, free;
- take another slot's prefix: ``seq_cp(src, dst, -1, -1)`` copies the whole stream (llama.cpp copies whole
  streams only; a few milliseconds for a 2048-cell stream of SmolLM2), then keep the prefix;
- a finished job's slot keeps its prompt: the next job with the same prefix, in this call or a later one,
  starts from it (the prefix cache is the idle slots, least recently used reused first).

Recurrent and hybrid models (Mamba-2, LFM2's short convolutions, beside attention layers) hold one state per
sequence, at its last position; llama.cpp cannot drop the tail of such a sequence (a partial ``seq_rm`` fails,
and leaves the memory as it was). On them (``SlotTable.recurrent``) a slot offers only all it holds: a prefix is
shared by copying a sequence whose state is exactly at the prefix's end, ``keep`` of a part empties the slot, and
speculation rolls back by restoring a checkpoint of the recurrent state (``backends.llamacpp.step``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ffi import LlamaContext, LlamaModel, TokenBatch

__all__ = ["Lane", "Slot", "SlotTable", "common_prefix"]


@dataclass(eq=False)
class Slot:
    seq: int
    tokens: list[int] = field(default_factory=list)
    """What the stream holds: the token at each position, from 0."""
    job: Any = None
    """The job running here, or None (then ``tokens`` is a cached prompt)."""
    last_used: int = 0


class SlotTable:
    """The slots of one context, and the KV operations that keep them in step with llama.cpp's memory."""

    def __init__(self, ctx: LlamaContext, n: int, capacity: int) -> None:
        self.ctx = ctx
        self.capacity = capacity
        self.slots = [Slot(i) for i in range(n)]
        self._tick = 0
        self.recurrent = ctx.model.memory != "attention"
        """The memory cannot drop a sequence's tail: ``keep`` of a part empties the slot."""
        self.pending: set[int] = set()
        """Sequences in stream copies that run at the next decode call (the scheduler clears it after one)."""

    def free(self) -> list[Slot]:
        return [s for s in self.slots if s.job is None]

    @property
    def cells_used(self) -> int:
        return sum(len(s.tokens) for s in self.slots)

    def keep(self, slot: Slot, n: int) -> None:
        """Keep the first ``n`` positions of ``slot``, drop the rest (on recurrent memory: all of them, unless
        ``n`` is all it holds)."""
        if n < len(slot.tokens):
            if self.recurrent:
                n = 0
            self.ctx.seq_rm(slot.seq, n, -1)
            del slot.tokens[n:]

    def offers(self, slot: Slot, shared: int) -> int:
        """How much of a prompt that shares ``shared`` tokens with ``slot`` the slot can give: on recurrent memory
        all it holds or nothing (its state is at its last position only)."""
        return 0 if self.recurrent and shared < len(slot.tokens) else shared

    def copy(self, src: Slot, dst: Slot, n: int) -> None:
        """``dst`` holds ``src``'s first ``n`` positions (the stream is copied at the next decode call)."""
        self.ctx.seq_cp(src.seq, dst.seq, -1, -1)
        self.pending.update((src.seq, dst.seq))
        dst.tokens = list(src.tokens)
        self.keep(dst, n)

    def touch(self, slot: Slot) -> None:
        self._tick += 1
        slot.last_used = self._tick

    def clear(self) -> None:
        for slot in self.slots:
            if slot.job is None:
                self.keep(slot, 0)


class Lane:
    """A context and its sequences: the batched one (max_seqs x seq_ctx), or one sequence of n_ctx for jobs
    too large for it. ``n_outputs``: the most logits rows a call returns (with speculation, a job's draft's too)."""

    def __init__(
        self,
        model: LlamaModel,
        *,
        n_seqs: int,
        seq_ctx: int,
        n_batch: int,
        n_threads: int,
        flash_attn: bool,
        n_outputs: int,
    ) -> None:
        self.ctx = LlamaContext(
            model,
            seq_ctx=seq_ctx,
            n_seq_max=n_seqs,
            n_batch=n_batch,
            n_threads=n_threads,
            flash_attn=flash_attn,
            n_outputs=n_outputs,
        )
        self.batch = TokenBatch(model.lib, n_batch)
        self.slots = SlotTable(self.ctx, n_seqs, self.ctx.seq_ctx)

    def close(self) -> None:
        self.ctx.close()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` share from the start."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n
