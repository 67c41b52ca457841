"""A draft model for speculative decoding: a second GGUF with the target's vocabulary, run by llama.cpp.

It drafts for the llama.cpp engine (``EngineConfig.draft_model``, one more ``speculation.Drafter``) and for the
PyTorch backend (the ``DraftSteps`` of ``speculation.drafters.DraftTrees``: its ``steps`` rank several tokens a
position)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np

from ...speculation.drafters import DrafterBase
from ..ffi import LlamaContext, LlamaModel, TokenBatch
from ..slots import common_prefix

__all__ = ["DraftModel"]


class DraftModel(DrafterBase):
    """A smaller GGUF with the target's vocabulary, drafting greedily (a deterministic draft, verified by
    sample-and-compare). Keeps a KV stream per sequence and computes only the tokens it has not seen. A hybrid
    draft model (recurrent layers) cannot drop its rejected draft tokens: it checkpoints its recurrent state after
    the confirmed tokens and goes back to it before the next draft."""

    name = "draft_model"

    def __init__(self, path: str | os.PathLike[str], *, n_seqs: int, seq_ctx: int, n_threads: int) -> None:
        self.model: LlamaModel = LlamaModel(path)
        self.ctx: LlamaContext = LlamaContext(self.model, seq_ctx=seq_ctx, n_seq_max=n_seqs, n_batch=512,
                                              n_threads=n_threads)  # fmt: skip
        self.batch = TokenBatch(self.model.lib, 512)
        self._held: dict[int, list[int]] = {}
        self.recurrent = self.model.memory != "attention"
        self._checkpoints: dict[int, tuple[int, bytes]] = {}
        self.computed = 0
        """Tokens decoded so far (prompts, confirmed tokens and drafts), for benches and tests."""

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        out: list[int] = []
        if k <= 0:
            return out
        for ranked in self.steps(seq, tokens):
            out.append(ranked[0][0])
            if len(out) >= k or self.model.is_eog(out[-1]):
                break
        return out

    def steps(
        self, seq: int, tokens: Sequence[int], width: int = 1, *, probs: bool = False
    ) -> Iterator[list[tuple[int, float]]]:
        """Draft after ``tokens`` one position at a time: each item is the ``width`` most likely next tokens with
        their probabilities (without ``probs``, 1.0: no softmax is computed), most likely first; the first is
        fed back as the next position's input when the caller asks for the next item. Stop by not asking (the
        tokens drafted so far stay cached and are dropped or kept by the next call's ``tokens``)."""
        held = self._held.setdefault(seq, [])
        self._rewind(seq, held, min(common_prefix(held, tokens), len(tokens) - 1))  # compute at least the last
        todo = list(tokens[len(held) :])
        while len(held) + len(todo) < self.ctx.seq_ctx:
            if self.recurrent and len(held) == len(tokens):  # the confirmed tokens are in: the next draft's start
                self._checkpoints[seq] = (len(held), self.ctx.recurrent_state(seq))
            idx = -1
            for start in range(0, len(todo), self.batch.capacity):  # the unseen tokens, then each draft token
                part = todo[start : start + self.batch.capacity]
                self.batch.clear()
                idx = self.batch.add(part, len(held), seq, logits_last=True)
                if self.ctx.decode(self.batch) != 0:
                    return
                held.extend(part)
                self.computed += len(part)
            logits = self.ctx.logits(idx)
            if width <= 1 and not probs:
                ranked = [(int(np.argmax(logits)), 1.0)]
            else:
                top = np.argpartition(logits, -width)[-width:] if width > 1 else np.array([np.argmax(logits)])
                top = top[np.argsort(-logits[top])]
                z = logits - logits[top[0]]
                p = np.exp(z[top]) / float(np.exp(z).sum()) if probs else np.ones(len(top))
                ranked = [(int(t), float(q)) for t, q in zip(top, p, strict=True)]
            yield ranked
            if self.model.is_eog(ranked[0][0]):
                return
            todo = [ranked[0][0]]

    def _rewind(self, seq: int, held: list[int], keep: int) -> None:
        """Keep the first ``keep`` of the ``held`` tokens of ``seq`` (a recurrent model: those up to its
        checkpoint, or none)."""
        if keep >= len(held):
            return
        checkpoint = self._checkpoints.get(seq)
        if not self.recurrent:
            self.ctx.seq_rm(seq, keep, -1)
        elif checkpoint is not None and checkpoint[0] <= keep:
            keep, state = checkpoint
            self.ctx.restore_recurrent_state(seq, state)
            self.ctx.seq_rm(seq, keep, -1)  # the state is at keep - 1 again: only attention cells go
        else:
            keep = 0
            self.ctx.seq_rm(seq, -1, -1)
        del held[keep:]

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        self.ctx.seq_rm(seq, -1, -1)
        self._held.pop(seq, None)
        self._checkpoints.pop(seq, None)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()
