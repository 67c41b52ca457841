"""A draft model for speculative decoding: a second GGUF with the target's vocabulary, run by llama.cpp.

It drafts for the llama.cpp engine (``EngineConfig.draft_model``, one more ``speculation.Drafter``) and for the
PyTorch backend (the ``DraftSteps`` of ``speculation.drafters.DraftTrees``: its ``steps`` rank several tokens a
position)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence

import numpy as np

from ..speculation.drafters import Constraint, DrafterBase
from ..speculation.speculator import size_class
from .ffi import LlamaContext, LlamaModel, TokenBatch
from .slots import common_prefix

__all__ = ["DraftModel", "load_draft_model"]

POSITION_ALPHA = 0.2
"""Weight of each timed call in a size class's seconds per drafted position."""

MIN_SHARED = 32
"""Prompt tokens another sequence must hold beyond what a sequence holds itself for the sequence to take its
stream instead of computing them (a stream copy costs a few milliseconds, about what SmolLM2 takes for as many
tokens)."""


class DraftModel(DrafterBase):
    """A smaller GGUF with the target's vocabulary, drafting greedily (a deterministic draft, verified by
    sample-and-compare). Keeps a KV stream per sequence and computes only the tokens it has not seen. A hybrid
    draft model (recurrent layers) cannot drop its rejected draft tokens: it checkpoints its recurrent state after
    the confirmed tokens and goes back to it before the next draft.

    ``propose_many`` drafts for every sequence of a step together: one decode call per drafted position, over the
    sequences still drafting (each its own length), so eight sequences cost a draft position about what one
    does on a CPU, not eight times it. Each call's seconds, by batch size class, are ``draft_seconds``: what
    the speculator counts before it asks for a draft (``Drafter.costly``)."""

    name = "draft_model"
    costly = True
    constrained = True

    def __init__(self, path: str | os.PathLike[str], *, n_seqs: int, seq_ctx: int, n_threads: int) -> None:
        self.model: LlamaModel = LlamaModel(path)
        self.ctx: LlamaContext = LlamaContext(self.model, seq_ctx=seq_ctx, n_seq_max=n_seqs, n_batch=512,
                                              n_threads=n_threads)  # fmt: skip
        self.batch = TokenBatch(self.model.lib, 512)
        self._held: dict[int, list[int]] = {}
        self.recurrent = self.model.memory != "attention"
        self._checkpoints: dict[int, tuple[int, bytes]] = {}
        self._position_s: dict[int, float] = {}
        self._constraints: dict[int, Constraint] = {}
        self.computed = 0
        """Tokens decoded so far (prompts, confirmed tokens and drafts), for benches and tests."""
        self.calls = 0
        """Decode calls so far, for benches and tests."""
        self.shared = 0
        """Prompt tokens taken from other sequences' streams instead of computed (``_share``)."""

    def draft_seconds(self, seqs: int) -> float:
        """Seconds of one drafted position over ``seqs`` sequences, as measured (their size class's, else the
        nearest measured class's; 0 before any)."""
        if not self._position_s:
            return 0.0
        size = size_class(seqs)
        return self._position_s.get(size) or self._position_s[min(self._position_s, key=lambda s: abs(s - size))]

    def start(self, seq: int, schema: str, constraint: Constraint | None = None) -> None:
        """The job on ``seq`` replies under ``constraint`` (its grammar's parse state, which the job advances): its
        drafts pick the most likely token the grammar allows, as the job's greedy sampler does."""
        if constraint is None:
            self._constraints.pop(seq, None)
        else:
            self._constraints[seq] = constraint

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        return self.propose_many([(seq, tokens, k)])[0]

    def prefill(self, seq: int, prompt: Sequence[int]) -> None:
        """Compute ``prompt`` but its last token (the first draft's input) for ``seq``."""
        if prompt:
            self._catch_up(seq, prompt)

    def propose_many(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[list[int]]:
        """Up to ``k`` greedy tokens after ``tokens`` for each ``(seq, tokens, k)`` (under the job's grammar where
        it has one), all sequences in one call a position. The first call also computes each sequence's tokens
        confirmed since its last draft (a sequence with more than its share of the batch computes them apart
        first)."""
        out: list[list[int]] = [[] for _ in requests]
        feed = self._feed(requests)  # request -> (the tokens it feeds next, its draft's length)
        # request -> a copy of its job's parse state, advanced as it drafts
        grammars = {i: self._constraints[requests[i][0]].fork() for i in feed if requests[i][0] in self._constraints}
        first = True
        try:
            while feed:
                self.batch.clear()
                at = {}
                for i, (todo, _) in feed.items():
                    seq = requests[i][0]
                    at[i] = self.batch.add(todo, len(self._held[seq]), seq, logits_last=True)
                start = time.perf_counter()
                if self._decode():
                    break
                if not first:  # the first call also computes the tokens confirmed since the last draft
                    size = size_class(len(feed))
                    old = self._position_s.get(size)
                    spent = time.perf_counter() - start
                    self._position_s[size] = spent if old is None else old + POSITION_ALPHA * (spent - old)
                drafting: dict[int, tuple[list[int], int]] = {}
                for i, (todo, k) in feed.items():
                    seq = requests[i][0]
                    self._held[seq].extend(todo)
                    if first and self.recurrent:  # the confirmed tokens are in: the next draft's start
                        self._checkpoints[seq] = (len(self._held[seq]), self.ctx.recurrent_state(seq))
                    logits = self.ctx.logits(at[i])
                    best = grammars[i].pick(logits) if i in grammars else int(np.argmax(logits))
                    if best < 0:  # the grammar allows nothing after this draft: it ends here
                        continue
                    out[i].append(best)
                    if len(out[i]) < k and not self.model.is_eog(best):
                        drafting[i] = ([best], k)
                feed, first = drafting, False
        finally:
            for grammar in grammars.values():
                grammar.close()
        return out

    def _feed(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> dict[int, tuple[list[int], int]]:
        """What each request's first call computes (the tokens its sequence does not hold yet) and its draft's
        length; requests that cannot draft are left out."""
        feed = {}
        share = max(1, self.batch.capacity // max(1, len(requests)))
        for i, (seq, tokens, k) in enumerate(requests):
            k = min(k, self.ctx.seq_ctx - len(tokens) - 1)
            if k <= 0 or not tokens:
                continue
            todo = self._unheld(seq, tokens)
            if len(todo) > share:
                last = self._catch_up(seq, tokens)
                if last is None:
                    continue
                todo = [last]
            feed[i] = (todo, k)
        return feed

    def steps(
        self, seq: int, tokens: Sequence[int], width: int = 1, *, probs: bool = False
    ) -> Iterator[list[tuple[int, float]]]:
        """Draft after ``tokens`` one position at a time: each item is the ``width`` most likely next tokens with
        their probabilities (without ``probs``, 1.0: no softmax is computed), most likely first; the first is
        fed back as the next position's input when the caller asks for the next item. Stop by not asking (the
        tokens drafted so far stay cached and are dropped or kept by the next call's ``tokens``)."""
        if not tokens:
            return
        held = self._held.setdefault(seq, [])
        token = self._catch_up(seq, tokens)
        first = True
        if token is None:
            return
        while len(held) + 1 < self.ctx.seq_ctx:
            self.batch.clear()
            idx = self.batch.add([token], len(held), seq, logits_last=True)
            if self._decode():
                return
            held.append(token)
            if first and self.recurrent:
                self._checkpoints[seq] = (len(held), self.ctx.recurrent_state(seq))
            first = False
            ranked = _ranked(self.ctx.logits(idx), width, probs)
            yield ranked
            if self.model.is_eog(ranked[0][0]):
                return
            token = ranked[0][0]

    def _unheld(self, seq: int, tokens: Sequence[int]) -> list[int]:
        """Drop what ``seq`` holds past what it shares with ``tokens`` (and at least the last token); return the
        tokens it does not hold."""
        held = self._held.setdefault(seq, [])
        self._rewind(seq, held, min(common_prefix(held, tokens), len(tokens) - 1))
        return list(tokens[len(held) :])

    def _catch_up(self, seq: int, tokens: Sequence[int]) -> int | None:
        """Make ``seq`` hold ``tokens`` but the last, computing only what it does not hold yet (in calls of a
        batch's capacity, without logits); return the last token, which the next call computes with logits (None
        where llama.cpp refused a call)."""
        self._share(seq, tokens)
        held = self._held[seq]
        todo = self._unheld(seq, tokens)[:-1]
        for start in range(0, len(todo), self.batch.capacity):
            part = todo[start : start + self.batch.capacity]
            self.batch.clear()
            self.batch.add(part, len(held), seq, logits_last=False)
            if self._decode():  # no room: no draft for this sequence this step (a draft is never needed)
                return None
            held.extend(part)
        return int(tokens[-1])

    def _share(self, seq: int, tokens: Sequence[int]) -> None:
        """Where another sequence holds at least ``MIN_SHARED`` more of the start of ``tokens`` (but the last) than
        ``seq`` does, ``seq`` takes that sequence's stream and keeps the shared part: llama.cpp copies the whole
        stream at the next decode call, before that call writes anything, so the copy is what the other
        sequence holds now. Not on recurrent memory, whose state is at a sequence's last position only."""
        held = self._held.setdefault(seq, [])
        own, limit = common_prefix(held, tokens), len(tokens) - 1
        if self.recurrent or limit - own < MIN_SHARED:  # holding its prompt (every draft step), it looks no further
            return
        shared, donor = max(((min(common_prefix(h, tokens), limit), s) for s, h in self._held.items() if s != seq),
                            default=(0, seq))  # fmt: skip
        if shared - own < MIN_SHARED:
            return
        self.ctx.seq_cp(donor, seq, -1, -1)
        self._held[seq] = list(self._held[donor])
        self._rewind(seq, self._held[seq], shared)
        self.shared += shared - own

    def _decode(self) -> bool:
        """Decode the batch; True where llama.cpp refused it (no room: the draft stops there)."""
        self.calls += 1
        if self.ctx.decode(self.batch) != 0:
            return True
        self.computed += self.batch.n
        return False

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
        self._constraints.pop(seq, None)
        self.ctx.seq_rm(seq, -1, -1)
        self._held.pop(seq, None)
        self._checkpoints.pop(seq, None)

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


def _ranked(logits: np.ndarray, width: int, probs: bool) -> list[tuple[int, float]]:
    """The ``width`` most likely tokens, most likely first, with their probabilities (1.0 without ``probs``)."""
    if width <= 1 and not probs:
        return [(int(np.argmax(logits)), 1.0)]
    top = np.argpartition(logits, -width)[-width:] if width > 1 else np.array([np.argmax(logits)])
    top = top[np.argsort(-logits[top])]
    z = logits - logits[top[0]]
    p = np.exp(z[top]) / float(np.exp(z).sum()) if probs else np.ones(len(top))
    return [(int(t), float(q)) for t, q in zip(top, p, strict=True)]


def load_draft_model(path: str | os.PathLike[str], seq_ctx: int, n_threads: int) -> DraftModel:
    """``path`` as a draft model of one sequence of ``seq_ctx`` cells on ``n_threads`` threads: the
    ``speculation.drafters.DraftLoader`` another engine (``pytorch``) drafts its token trees with."""
    return DraftModel(path, n_seqs=1, seq_ctx=seq_ctx, n_threads=n_threads)
