"""Drafters: cheap guesses of a sequence's next tokens, behind one interface.

``propose(seq, tokens, k)`` returns up to ``k`` tokens that may follow ``tokens`` (the job's prompt and its
reply so far) in sequence ``seq``; ``finish(seq, tokens, n_prompt)`` tells the drafter the job ended (it may
learn from the reply, and frees what it kept for ``seq``). A wrong draft costs only verify time: the rules in
``rules.py`` make every draft lossless, so a drafter is judged by its acceptance alone.

- ``ContextLookup``: the job's own text (prompt lookup). Extraction replies quote their excerpt; the tokens that
  followed the most recent earlier occurrence of the last ``n`` tokens (longest ``n`` first) are the draft.
- ``TraceCache``: n-grams of accepted replies across jobs, runs and restarts (Aurora's idea, without training):
  the JSON skeleton every job repeats, and phrases the model likes. Bounded (least recently used go first),
  persisted per model with atomic writes.
- ``TraceCache(scope=schema)`` as the grammar drafter: continuations seen under one JSON schema (keys, quotes,
  separators the grammar makes the model write) with short keys, so it fires right after a value closes.
- ``DraftModel``: a second GGUF with the same vocabulary, drafting greedily.
- ``ScriptedDrafter``: proposals from a function, for tests.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from minions.paths import cache_dir

if TYPE_CHECKING:
    from ..ffi import LlamaContext, LlamaModel

__all__ = [
    "ContextLookup",
    "DraftModel",
    "Drafter",
    "ScriptedDrafter",
    "TraceCache",
    "model_key",
    "schema_key",
]

log = logging.getLogger(__name__)


@runtime_checkable
class Drafter(Protocol):
    name: str

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]: ...

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None: ...


class ContextLookup:
    """Prompt lookup over the job's own tokens: most recent earlier match of the last ``n`` tokens, for ``n``
    from ``max_n`` down to ``min_n``; the draft is what followed that match."""

    name = "context"

    def __init__(self, *, min_n: int = 2, max_n: int = 4) -> None:
        self.min_n, self.max_n = min_n, max_n
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        self._done: dict[int, int] = {}

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        index = self._index.setdefault(seq, {})
        done = self._done.get(seq, 0)
        # index[gram] = where the tokens after the latest occurrence of ``gram`` start; positions < len(tokens)
        # only, so the suffix being matched never finds itself
        for j in range(max(done, self.min_n), len(tokens)):
            for n in range(self.min_n, min(self.max_n, j) + 1):
                index[tuple(tokens[j - n : j])] = j
        self._done[seq] = max(done, len(tokens))
        for n in range(min(self.max_n, len(tokens)), self.min_n - 1, -1):
            start = index.get(tuple(tokens[len(tokens) - n :]))
            if start is not None:
                return list(tokens[start : start + k])
        return []

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        self._index.pop(seq, None)
        self._done.pop(seq, None)


class TraceCache:
    """Continuations of n-grams seen in accepted replies: ``gram -> the next up to `span` tokens`` (the most
    recent wins), for n-gram orders ``orders`` (longest tried first), at most ``max_entries`` of them.

    ``path``: where it persists (``save()``; loaded at construction). ``scope``: a key prefix, so one file can
    hold several caches (per JSON schema) apart."""

    def __init__(
        self,
        *,
        name: str = "trace",
        orders: Sequence[int] = (4, 2),
        span: int = 16,
        max_entries: int = 200_000,
        path: Path | None = None,
        scope: str = "",
        context: int = 4,
    ) -> None:
        self.name = name
        self.orders = sorted(orders, reverse=True)
        self.span = span
        self.max_entries = max_entries
        self.path = path
        self.scope = scope
        self.context = context
        """Prompt tokens before the reply that count as its first n-grams' history (the assistant header)."""
        self.table: OrderedDict[tuple[Any, ...], tuple[int, ...]] = OrderedDict()
        self._scopes: dict[int, str] = {}
        self._dirty = False
        if path is not None and path.is_file():
            self._load(path)

    def set_scope(self, seq: int, scope: str) -> None:
        """Sequence ``seq`` runs a job of this scope (e.g. its JSON schema's key) until it finishes."""
        self._scopes[seq] = scope

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        scope = self._scopes.get(seq, self.scope)
        for n in self.orders:
            if len(tokens) < n:
                continue
            key = (scope, *tokens[len(tokens) - n :])
            cont = self.table.get(key)
            if cont is not None:
                self.table.move_to_end(key)
                return list(cont[:k])
        return []

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        scope = self._scopes.pop(seq, self.scope)
        self.learn(tokens[max(0, n_prompt - self.context) :], scope=scope, first=min(self.context, n_prompt))

    def learn(self, tokens: Sequence[int], *, scope: str | None = None, first: int = 0) -> None:
        """Record the continuations after every position from ``first`` on."""
        scope = self.scope if scope is None else scope
        self._dirty = self._dirty or len(tokens) > max(first, 1)
        for j in range(max(first, 1), len(tokens)):
            cont = tuple(tokens[j : j + self.span])
            for n in self.orders:
                if j >= n:
                    key = (scope, *tokens[j - n : j])
                    self.table[key] = cont
                    self.table.move_to_end(key)
        while len(self.table) > self.max_entries:
            self.table.popitem(last=False)

    # -- persistence -------------------------------------------------------------------------------------
    def save(self) -> None:
        """Write the table to ``path`` atomically (a temporary file, then ``os.replace``), if it changed."""
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rows = [[list(key), list(cont)] for key, cont in self.table.items()]
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": 1, "span": self.span, "rows": rows}))
        os.replace(tmp, self.path)
        self._dirty = False

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text())
            for key, cont in data["rows"][-self.max_entries :]:
                self.table[tuple(key)] = tuple(cont)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable speculator trace %s: %s", path, exc)
            self.table.clear()

    @classmethod
    def for_model(cls, model_path: Path, *, name: str = "trace", **kwargs: Any) -> TraceCache:
        """The persistent cache of one model: ``cache_dir()/speculator/<name>-<model key>.json``."""
        path = cache_dir() / "speculator" / f"{name}-{model_key(model_path)}.json"
        return cls(name=name, path=path, **kwargs)


def model_key(path: Path) -> str:
    """A model's name and a hash of its size and first MiB: two files with one name but other weights differ."""
    h = hashlib.sha256(str(path.stat().st_size).encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
    return f"{path.stem}-{h.hexdigest()[:12]}"


def schema_key(schema: Mapping[str, Any] | None) -> str:
    if schema is None:
        return ""
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:12]


class ScriptedDrafter:
    """Proposals from ``script(seq, tokens, k)``; ``finished`` records what each job ended with."""

    def __init__(self, script: Callable[[int, Sequence[int], int], Sequence[int]], name: str = "scripted") -> None:
        self.script = script
        self.name = name
        self.finished: list[list[int]] = []

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        return list(self.script(seq, tokens, k))[:k]

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        self.finished.append(list(tokens[n_prompt:]))


class DraftModel:
    """A smaller GGUF with the target's vocabulary, drafting greedily (a deterministic draft, verified by
    sample-and-compare). Keeps a KV stream per sequence and computes only the tokens it has not seen. A hybrid
    draft model (recurrent layers) cannot drop its rejected draft tokens: it checkpoints its recurrent state after
    the confirmed tokens and goes back to it before the next draft."""

    name = "draft_model"

    def __init__(self, path: str | os.PathLike[str], *, n_seqs: int, seq_ctx: int, n_threads: int) -> None:
        from ..ffi import LlamaContext, LlamaModel, TokenBatch

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
        import numpy as np

        from ..slots import common_prefix

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

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        self.ctx.seq_rm(seq, -1, -1)
        self._held.pop(seq, None)
        self._checkpoints.pop(seq, None)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()
