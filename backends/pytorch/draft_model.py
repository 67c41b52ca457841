"""A draft model's best-first token tree (SpecExec's idea), drafted by llama.cpp for a PyTorch target.

The draft is a GGUF with the target's vocabulary run by llama.cpp (``DraftModel``): by default the target's own
GGUF, which llama.cpp decodes several times faster on a CPU than PyTorch does (its quantized matrix kernels
against PyTorch's per-layer overhead). Its greedy choice agrees with the dequantized target's most of the time,
and where it does not, the target's choice is usually among its next few.

One step drafts position by position: at each, the draft's ``width`` most likely tokens become children of the
previous position's most likely one (the chain the draft continues), each valued by the chance the target walks
there: the product along its path of what ``Calibration`` measured for nodes of that rank and draft probability.
Drafting stops when more positions, looked at several ahead, no longer pay for a draft position's measured time
and their verify cost ``T(n)``; the tree is then the best-first nodes by value, as many as maximize expected
tokens per second counting the drafting time (the forced tokens of a grammar come first, valued 1). The target
verifies it in one forward pass and walks it with its own greedy or sampled choices (``tree.walk``), so the
output is what plain decoding gives.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from statistics import median
from typing import TYPE_CHECKING

from .draft import ForwardCost
from .tree import TokenTree

if TYPE_CHECKING:
    from ..llamacpp.speculative.drafters import DraftModel

__all__ = ["Calibration", "DraftTrees", "best_first"]

SEQ = 0
"""The PyTorch backend runs one job at a time: one draft sequence."""


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
    maximizes expected tokens per second, ``(1 + sum of their values) / (spent + cost(n))``; also each kept
    node's old index.

    A child's value never exceeds its parent's, so ordering by value (ties: the earlier node) puts parents first
    and every prefix of the order is a tree.
    """
    order = [0, *sorted(range(1, len(tokens)), key=lambda i: (-values[i], i))][: (max_nodes or len(tokens)) + 1]
    best_n, best_rate, gain = 1, 1.0 / (spent + cost(1)), 0.0
    for n in range(2, len(order) + 1):
        gain += values[order[n - 1]]
        rate = (1.0 + gain) / (spent + cost(n))
        if rate > best_rate:
            best_n, best_rate = n, rate
    kept = order[:best_n]
    new = {old: i for i, old in enumerate(kept)}
    tree = TokenTree(tuple(tokens[i] for i in kept), tuple(new[parents[i]] if i else -1 for i in kept))
    return tree, kept


class Calibration:
    """How often the target walked into a drafted node whose parent it walked into, by the node's rank among
    the draft's choices at its position and its draft probability. A draft that is the target's own quantized
    copy is right far more often than its probabilities say (it agrees on the most likely token even where it
    is unsure), and a sibling far less often; the tree values nodes by what was measured."""

    BUCKETS = 5
    RANKS = 3

    def __init__(self) -> None:
        self.tried = [[0] * self.BUCKETS for _ in range(self.RANKS)]
        self.accepted = [[0] * self.BUCKETS for _ in range(self.RANKS)]

    def _cell(self, rank: int, p: float) -> tuple[int, int]:
        return min(rank, self.RANKS - 1), min(int(p * self.BUCKETS), self.BUCKETS - 1)

    def value(self, rank: int, p: float) -> float:
        """The chance the target takes the node, given that it took its parent: the node's cell, shrunk toward
        its rank's rate over all probabilities, shrunk in turn toward the draft's ``p`` (each prior worth 4
        tries), so a cell seldom seen borrows from its rank rather than trusting the draft."""
        r, b = self._cell(rank, p)
        pooled = (sum(self.accepted[r]) + 4 * p) / (sum(self.tried[r]) + 4)
        return (self.accepted[r][b] + 4 * pooled) / (self.tried[r][b] + 4)

    def record(self, tree: TokenTree, ranks: Sequence[int], probs: Sequence[float], path: Sequence[int]) -> None:
        """Count one verify step: every drafted node whose parent was accepted was tried (forced ones aside)."""
        on_path = set(path)
        for i in range(1, len(tree)):
            if tree.parents[i] in on_path and probs[i] < 1.0:
                r, b = self._cell(ranks[i], probs[i])
                self.tried[r][b] += 1
                self.accepted[r][b] += i in on_path

    def table(self) -> dict[int, list[float]]:
        """``{rank: [value at each bucket's middle]}`` (what benches print)."""
        return {r: [round(self.value(r, (b + 0.5) / self.BUCKETS), 3) for b in range(self.BUCKETS)]
                for r in range(self.RANKS)}  # fmt: skip


class DraftTrees:
    """Trees drafted by a llama.cpp model for one PyTorch target (one job at a time)."""

    def __init__(self, path: str | os.PathLike[str], *, n_threads: int, seq_ctx: int = 4096) -> None:
        from ..llamacpp.speculative.drafters import DraftModel

        self.model: DraftModel = DraftModel(path, n_seqs=1, seq_ctx=seq_ctx, n_threads=n_threads)
        self.position_s: deque[float] = deque([0.01], maxlen=32)
        """Seconds per drafted position after a step's first, the latest measured (a guess of 10 ms before any)."""
        self.first_s: deque[float] = deque([0.015], maxlen=32)
        """Seconds to a step's first drafted position, which also computes the tokens accepted since the last."""

    @property
    def n_vocab(self) -> int:
        return int(self.model.model.n_vocab)

    def prefill(self, prompt: Sequence[int]) -> None:
        """Compute the prompt but its last token (the first tree's root) in the draft. The previous job's
        tokens stay cached until then, so a prompt that starts the same way (jobs over one chunk) computes only
        what differs."""
        if len(prompt) > 1:
            next(self.model.steps(SEQ, prompt[:-1]), None)

    def tree(
        self, context: Sequence[int], forced: Sequence[int], cost: ForwardCost, calibration: Calibration, *,
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
            if len(forced) + positions >= min(depth, max_nodes) or self.model.model.is_eog(ranked[0][0]):
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
        values: Sequence[float], q: float, factor: float, cost: ForwardCost, spent: float, step: float, room: int
    ) -> bool:
        """Whether drafting up to ``room`` more positions beats the best tree of the nodes drafted so far, in
        expected tokens per second, with each further position worth the last one's value times its ``factor``.
        The drafting time so far is spent either way; looking several positions ahead sees past a jump of
        ``T(n)`` (on a CPU, two tokens cost much more than one, sixteen hardly more than two)."""
        gain, rate, size = 0.0, 1.0 / (spent + cost(1)), 1
        for n, v in enumerate(sorted(values[1:], reverse=True), 2):
            gain += v
            if (1 + gain) / (spent + cost(n)) > rate:
                rate, size = (1 + gain) / (spent + cost(n)), n
        more = 0.0
        for k in range(1, room + 1):
            q *= factor
            more += q
            if (1 + gain + more) / (spent + k * step + cost(size + k)) > rate:
                return True
        return False

    def close(self) -> None:
        self.model.close()
