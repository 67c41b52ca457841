"""Drafters: cheap guesses of a sequence's next tokens, behind one interface (``Drafter``).

``propose(seq, tokens, k)`` returns up to ``k`` tokens that may follow ``tokens`` (the job's prompt and its
reply so far) in sequence ``seq``; ``finish(seq, tokens, n_prompt)`` tells the drafter the job ended (it may
learn from the reply, and frees what it kept for ``seq``). A wrong draft costs only verify time: the rule
(``tree.accept``) makes every draft lossless, so a drafter is judged by its acceptance alone. What else a
drafter needs it declares (``Drafter.per_schema``, ``Drafter.learns``), and the speculator asks nothing more.

- ``ContextIndex``: where each token of the job's own text occurs. Extraction replies quote their excerpt, so
  what followed an earlier place that ends the way the text ends now is a good draft: the most recent place
  with the longest match (``ContextIndex.latest``, a chain: ``ContextLookup`` for the llama.cpp engine), or all
  of them merged into a trie ranked by support (``ContextIndex.drafts``, for the PyTorch backend's trees).
- ``TraceCache``: n-grams of accepted replies across jobs, runs and restarts (Aurora's idea, without training):
  the JSON skeleton every job repeats, and phrases the model likes. Bounded (least recently used go first),
  persisted per model with atomic writes.
- ``TraceCache(per_schema=True)`` as the grammar drafter: continuations seen under one JSON schema (keys, quotes,
  separators the grammar makes the model write) with short keys, so it fires right after a value closes.
- ``ScriptedDrafter``: proposals from a function, for tests.
- ``DraftTrees``: a draft model's best-first token trees (SpecExec's idea), for the PyTorch backend.

A draft model runs on an engine (``backends.llamacpp.draft_model.DraftModel``: a second GGUF with the
same vocabulary, drafting greedily): it is a ``Drafter`` of chains for the llama.cpp engine and the
``DraftSteps`` of ``DraftTrees``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any, Protocol, runtime_checkable

from minions.paths import cache_dir

from ..model_files import model_file_key
from .depth import Calibration, CostCurve, best_first, best_size
from .tree import TokenTree, Trie

__all__ = [
    "Constraint",
    "ContextIndex",
    "ContextLookup",
    "DraftLoader",
    "DraftSteps",
    "DraftTrees",
    "Drafter",
    "DrafterBase",
    "ScriptedDrafter",
    "TraceCache",
    "schema_key",
]

log = logging.getLogger(__name__)


class Constraint(Protocol):
    """What a job's reply must obey (its JSON schema's grammar), as a drafter needs it: the parse state after the
    reply so far. A drafter that drafts under it (``Drafter.constrained``) forks it at every draft, so that its
    draft is one the grammar allows, as every token the job emits is (a draft model that ignored it proposed
    prose where the grammar forces ``{"``, and every job's first steps failed)."""

    def fork(self) -> Constraint:
        """A copy of the parse state now, which the caller advances and closes."""
        ...

    def pick(self, logits: Any) -> int:
        """The most likely token the grammar allows under ``logits``, taken into this state; -1 if none."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Drafter(Protocol):
    """What the speculator asks of a drafter. Its needs are declared, not guessed from its class or name."""

    name: str
    per_schema: bool
    """It drafts per JSON schema: ``start`` tells it the schema key of each job (the grammar trace)."""
    learns: bool
    """It keeps what finished replies taught it: ``reset`` forgets it, ``save`` persists it."""
    costly: bool
    """Drafting takes time worth counting (a draft model): the speculator plans each sequence's draft length with
    ``draft_seconds`` before it asks, and asks for every sequence at once (``propose_many``)."""
    constrained: bool
    """It drafts under the job's grammar: ``start`` gives it the job's ``Constraint`` (None: no grammar)."""

    def start(self, seq: int, schema: str, constraint: Constraint | None = None) -> None: ...

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]: ...

    def propose_many(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[list[int]]:
        """``propose`` for each ``(seq, tokens, k)`` of a step."""
        ...

    def prefill(self, seq: int, prompt: Sequence[int]) -> None:
        """A job's prompt on ``seq`` was computed (a costly drafter computes it too, in the prompt's time rather
        than in its first decode step's)."""
        ...

    def draft_seconds(self, seqs: int) -> float:
        """Seconds of one drafted position over ``seqs`` sequences (0 for a lookup)."""
        ...

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None: ...

    def reset(self) -> None: ...

    def save(self) -> None: ...

    def close(self) -> None: ...


class DrafterBase:
    """A drafter that needs nothing beyond ``propose``: every other ``Drafter`` method does nothing."""

    name = "drafter"
    per_schema = False
    learns = False
    costly = False
    constrained = False

    def start(self, seq: int, schema: str, constraint: Constraint | None = None) -> None:
        pass

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        raise NotImplementedError

    def propose_many(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[list[int]]:
        return [self.propose(seq, tokens, k) for seq, tokens, k in requests]

    def prefill(self, seq: int, prompt: Sequence[int]) -> None:
        pass

    def draft_seconds(self, seqs: int) -> float:
        return 0.0

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        pass

    def reset(self) -> None:
        pass

    def save(self) -> None:
        pass

    def close(self) -> None:
        pass


class ContextIndex:
    """Where each token of one job's text occurs; grows as the job's tokens grow.

    A place is where the last token occurred before; its match is how many tokens before it equal the tokens
    before the end (at least 1). Places are weighted by the square of their match, the best ``max_places`` kept.
    """

    def __init__(self, *, max_match: int = 8, max_places: int = 48, scan: int = 256) -> None:
        self.max_match, self.max_places, self.scan = max_match, max_places, scan
        self._ends: dict[int, list[int]] = {}
        self._done = 0

    def _extend(self, tokens: Sequence[int]) -> None:
        # _ends[token] = the positions j (ascending) with tokens[j - 1] == token and j < len(tokens): the
        # continuation starts at j, so the end being matched never finds itself
        for j in range(max(self._done, 1), len(tokens)):
            self._ends.setdefault(tokens[j - 1], []).append(j)
        self._done = max(self._done, len(tokens))

    def _match(self, tokens: Sequence[int], j: int) -> int:
        """How many tokens before ``j`` equal the tokens before the end (at most ``max_match``)."""
        end, m = len(tokens), 0
        while m < self.max_match and j - m - 1 >= 0 and tokens[j - m - 1] == tokens[end - m - 1]:
            m += 1
        return m

    def latest(self, tokens: Sequence[int], k: int, *, min_n: int = 2, max_n: int = 4) -> list[int]:
        """Up to ``k`` tokens that followed the most recent place matching the longest ``n`` of the last tokens,
        ``n`` from ``max_n`` down to ``min_n``: a chain (prompt lookup). Places are scanned newest first, and the
        scan stops at the first that matches ``max_n``."""
        self._extend(tokens)
        best_m, best_j = 0, 0
        for j in reversed(self._ends.get(tokens[-1], []) if tokens else []):
            m = min(self._match(tokens, j), max_n)
            if m > best_m:  # newest first: a place replaces a newer one only when it matches more
                best_m, best_j = m, j
                if m >= max_n:
                    break
        return list(tokens[best_j : best_j + k]) if best_m >= min_n else []

    def drafts(self, tokens: Sequence[int], depth: int) -> Trie:
        """Continuations of up to ``depth`` tokens after the places matching the end of ``tokens``."""
        self._extend(tokens)
        trie = Trie()
        if depth <= 0 or not tokens:
            return trie
        places = self._ends.get(tokens[-1], [])[-self.scan :]
        matched = sorted(((self._match(tokens, j), j) for j in places), reverse=True)[: self.max_places]
        for m, j in matched:
            trie.add(tokens[j : min(j + depth, len(tokens))], float(m * m), m)
        return trie


class ContextLookup(DrafterBase):
    """Prompt lookup over the job's own tokens (``ContextIndex.latest``): most recent earlier match of the last
    ``n`` tokens, for ``n`` from ``max_n`` down to ``min_n``; the draft is what followed that match."""

    name = "context"

    def __init__(self, *, min_n: int = 2, max_n: int = 4) -> None:
        self.min_n, self.max_n = min_n, max_n
        self._index: dict[int, ContextIndex] = {}

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        index = self._index.get(seq)
        if index is None:
            index = self._index[seq] = ContextIndex()
        return index.latest(tokens, k, min_n=self.min_n, max_n=self.max_n)

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        self._index.pop(seq, None)


class TraceCache(DrafterBase):
    """Continuations of n-grams seen in accepted replies: ``gram -> the next up to `span` tokens`` (the most
    recent wins), for n-gram orders ``orders`` (longest tried first), at most ``max_entries`` of them.

    ``path``: where it persists (``save()``; loaded at construction). ``scope``: a key prefix, so one file can
    hold several caches apart; ``per_schema``: each job's scope is its JSON schema's key (the grammar trace)."""

    learns = True

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
        per_schema: bool = False,
    ) -> None:
        self.name = name
        self.per_schema = per_schema
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

    def start(self, seq: int, schema: str, constraint: Constraint | None = None) -> None:
        """Sequence ``seq`` runs a job under this schema key until it finishes (``per_schema`` only)."""
        if self.per_schema:
            self._scopes[seq] = schema

    def reset(self) -> None:
        self.table.clear()

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
        path = cache_dir() / "speculator" / f"{name}-{model_file_key(model_path)}.json"
        return cls(name=name, path=path, **kwargs)


def schema_key(schema: Mapping[str, Any] | None) -> str:
    if schema is None:
        return ""
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:12]


class ScriptedDrafter(DrafterBase):
    """Proposals from ``script(seq, tokens, k)``; ``finished`` records what each job ended with."""

    def __init__(self, script: Callable[[int, Sequence[int], int], Sequence[int]], name: str = "scripted") -> None:
        self.script = script
        self.name = name
        self.finished: list[list[int]] = []

    def propose(self, seq: int, tokens: Sequence[int], k: int) -> list[int]:
        return list(self.script(seq, tokens, k))[:k]

    def finish(self, seq: int, tokens: Sequence[int], n_prompt: int) -> None:
        self.finished.append(list(tokens[n_prompt:]))


class DraftSteps(Protocol):
    """A draft model as ``DraftTrees`` drives it (``backends.llamacpp.draft_model.DraftModel``)."""

    def steps(
        self, seq: int, tokens: Sequence[int], width: int = 1, *, probs: bool = False
    ) -> Iterator[list[tuple[int, float]]]:
        """Draft after ``tokens`` one position at a time: the ``width`` most likely next tokens and their
        probabilities, the first fed back as the next position's input when the next item is asked for."""
        ...

    def is_eog(self, token: int) -> bool: ...

    @property
    def n_vocab(self) -> int:
        """Tokens in its vocabulary: a draft model drafts for a target with the same vocabulary only."""
        ...

    def close(self) -> None: ...


DraftLoader = Callable[[Path, int, int], DraftSteps]
"""``(path, seq_ctx, n_threads) -> a draft model of one sequence``, as ``DraftTrees`` drives it: an engine that does
not run GGUF files itself (``pytorch``) is given one (``llamacpp.draft_model.load_draft_model``), and never imports
that engine at its own import."""

SEQ = 0
"""The PyTorch backend runs one job at a time: one draft sequence."""


class DraftTrees:
    """A draft model's best-first token trees (SpecExec's idea) for a target that decodes one job at a time (the
    PyTorch backend's).

    The draft (``DraftSteps``) is by default the target's own GGUF run by llama.cpp, which decodes several times
    faster on a CPU than PyTorch does (its quantized matrix kernels against PyTorch's per-layer overhead). Its
    greedy choice agrees with the dequantized target's most of the time, and where it does not, the target's
    choice is usually among its next few.

    One step drafts position by position: at each, the draft's ``width`` most likely tokens become children of
    the previous position's most likely one (the chain the draft continues), each valued by the chance the target
    walks there: the product along its path of what ``depth.Calibration`` measured for nodes of that rank and
    draft probability. Drafting stops when more positions, looked at several ahead, no longer pay for a draft
    position's measured time and their verify cost ``T(n)``; the tree is then the best-first nodes by value, as
    many as maximize expected tokens per second counting the drafting time (``depth.best_first``; the forced
    tokens of a grammar come first, valued 1). The target verifies it in one forward pass and walks it with its
    own greedy or sampled choices (``tree.accept``), so the output is what plain decoding gives.
    """

    name = "draft_model"

    def __init__(self, model: DraftSteps) -> None:
        self.model = model
        self.position_s: deque[float] = deque([0.01], maxlen=32)
        """Seconds per drafted position after a step's first, the latest measured (a guess of 10 ms before any)."""
        self.first_s: deque[float] = deque([0.015], maxlen=32)
        """Seconds to a step's first drafted position, which also computes the tokens accepted since the last."""

    def prefill(self, prompt: Sequence[int]) -> None:
        """Compute the prompt but its last token (the first tree's root) in the draft. The previous job's
        tokens stay cached until then, so a prompt that starts the same way (jobs over one chunk) computes only
        what differs."""
        if len(prompt) > 1:
            next(self.model.steps(SEQ, prompt[:-1]), None)

    def tree(
        self, context: Sequence[int], forced: Sequence[int], cost: CostCurve, calibration: Calibration, *,
        depth: int, width: int, max_nodes: int,
    ) -> tuple[TokenTree, list[int], list[float]]:  # fmt: skip
        """The tree below ``context[-1]`` (the root): ``forced`` as a chain, then the draft's positions.

        Returns the tree, each node's rank among the draft's choices at its position and its draft probability
        (0 and 1.0 for the root and forced tokens), for ``Calibration.record``.
        """
        forced = list(forced[:depth])
        n_fixed = 1 + len(forced)
        tokens, parents = [context[-1], *forced], list(range(-1, len(forced)))
        ranks, probs, values = [0] * n_fixed, [1.0] * n_fixed, [1.0] * n_fixed
        step, first, room = (
            median(self.position_s),
            median(self.first_s),
            min(depth - len(forced), max_nodes - n_fixed + 1),
        )
        # drafting is hopeless when even k positions all taken would not beat verifying the forced tokens alone
        base = n_fixed / cost(n_fixed)
        if all((n_fixed + k) / (cost(n_fixed + k) + first + (k - 1) * step) <= base for k in range(1, room + 1)):
            return TokenTree(tuple(tokens), tuple(parents)), ranks, probs
        start, q, parent, positions, ready = time.perf_counter(), 1.0, n_fixed - 1, 0, 0.0
        for ranked in self.model.steps(SEQ, [*context, *forced], width, probs=True):
            positions += 1
            ready = ready or time.perf_counter()  # the first position also computes the tokens new since the last
            for r, (token, p) in enumerate(ranked):
                tokens.append(token)
                parents.append(parent)
                ranks.append(r)
                probs.append(p)
                values.append(q * calibration.value(r, p))
            factor, q = values[-len(ranked)] / q if q > 0 else 0.0, values[-len(ranked)]
            parent = len(tokens) - len(ranked)
            if len(forced) + positions >= min(depth, max_nodes) or self.model.is_eog(ranked[0][0]):
                break
            if not self._worth_more(values, q, factor, cost, time.perf_counter() - start, step,
                                    min(depth, max_nodes) - len(forced) - positions):  # fmt: skip
                break
        if positions:
            self.first_s.append(ready - start)
        if positions > 1:
            self.position_s.append((time.perf_counter() - ready) / (positions - 1))
        tree, kept = best_first(tokens, parents, values, cost, time.perf_counter() - start, max_nodes=max_nodes)
        return tree, [ranks[i] for i in kept], [probs[i] for i in kept]

    @staticmethod
    def _worth_more(
        values: Sequence[float], q: float, factor: float, cost: CostCurve, spent: float, step: float, room: int
    ) -> bool:
        """Whether drafting up to ``room`` more positions beats the best tree of the nodes drafted so far, in
        expected tokens per second, with each further position worth the last one's value times its ``factor``.
        The drafting time so far is spent either way; looking several positions ahead sees past a jump of
        ``T(n)`` (on a CPU, two tokens cost much more than one, sixteen hardly more than two)."""
        ranked = sorted(values[1:], reverse=True)
        size = best_size(ranked, cost, spent)
        gain = sum(ranked[: size - 1])
        rate = (1 + gain) / (spent + cost(size))
        more = 0.0
        for k in range(1, room + 1):
            q *= factor
            more += q
            if (1 + gain + more) / (spent + k * step + cost(size + k)) > rate:
                return True
        return False

    def close(self) -> None:
        self.model.close()
