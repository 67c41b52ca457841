"""Draft trees from the job's own text, shaped by measured acceptance and measured cost.

- ``ContextIndex``: every earlier place where the job's text (prompt and reply so far) ends the way it ends
  now. Each place proposes what followed it; the proposals merge into a trie whose children are ranked by how
  much support they have (places weighted by how long their match with the current suffix is). Extraction
  replies quote their excerpt, so the right continuation is usually among them, not always the most recent.
- ``Acceptance``: how often a drafted node at depth ``d`` whose parent was accepted was itself accepted, by its
  rank ``r`` among its siblings: ``p[d][r]``, counted over every verify step (with a prior until measured).
- ``ForwardCost``: the measured time ``T(n)`` of one forward over ``n`` tokens.
- ``shape_tree``: Sequoia's tree choice. Under the positional model (a node is accepted with probability
  ``p[depth][rank]`` given its parent), a tree's expected accepted length is the sum over its nodes of the
  product of ``p`` along their path. That product shrinks from parent to child and from a rank to the next, so
  for every size ``n`` the best tree is the ``n`` nodes with the largest products, taken best first (the
  optimum of Sequoia's dynamic program for a given budget); the size is the one that maximizes tokens per
  second, ``(1 + E[accepted](n)) / T(1 + n)``. Nodes come from the context trie, so a tree never holds a node
  with nothing drafted behind it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .tree import TokenTree

__all__ = ["STRONG_MATCH", "Acceptance", "ContextIndex", "ForwardCost", "Trie", "shape_tree"]

STRONG_MATCH = 2
"""Drafts whose place matches at least this many tokens before the end are counted in their rank's column;
drafts from one-token matches (much less often right) in ranks ``width`` and up, so each gets its own p."""


@dataclass(slots=True)
class Trie:
    """Drafted continuations: ``children[token] = (support, longest match, subtrie)``."""

    children: dict[int, tuple[float, int, Trie]] = field(default_factory=dict)

    def add(self, tokens: Sequence[int], weight: float, match: int) -> None:
        node = self
        for t in tokens:
            support, best, child = node.children.get(t) or (0.0, 0, Trie())
            node.children[t] = (support + weight, max(best, match), child)
            node = child

    def ranked(self) -> list[tuple[int, int, Trie]]:
        """Children as ``(token, longest match, subtrie)``, most supported first (ties: the token seen first)."""
        order = sorted(self.children.items(), key=lambda kv: -kv[1][0])
        return [(t, best, sub) for t, (_, best, sub) in order]


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


class Acceptance:
    """Accepted / tried drafted nodes by depth (1 = a child of the root) and rank (0 = best supported)."""

    def __init__(self, max_depth: int, max_rank: int, prior: Callable[[int, int], float] | None = None) -> None:
        self.max_depth, self.max_rank = max_depth, max_rank
        half = max_rank // 2
        # the guess before anything is measured; ranks from ``half`` on are one-token matches' (shape_tree), a
        # guess high enough that they get tried, and so measured
        self._prior = prior or (lambda d, r: 0.6 / (1 + 2 * r) if r < half else 0.35 / (1 + 2 * (r - half)))
        self.tried = [[0] * max_rank for _ in range(max_depth + 1)]
        self.accepted = [[0] * max_rank for _ in range(max_depth + 1)]

    def p(self, depth: int, rank: int) -> float:
        d, r = min(depth, self.max_depth), min(rank, self.max_rank - 1)
        # a prior worth 4 tries, so a few measured steps move it and many measured ones decide it
        return (self.accepted[d][r] + 4 * self._prior(d, r)) / (self.tried[d][r] + 4)

    def record(self, tree: TokenTree, ranks: Sequence[int], path: Sequence[int]) -> None:
        """Count one verify step: every node whose parent was accepted was tried."""
        on_path = set(path)
        depths = tree.depths()
        for i in range(1, len(tree)):
            if tree.parents[i] in on_path:
                d, r = min(depths[i], self.max_depth), min(ranks[i], self.max_rank - 1)
                self.tried[d][r] += 1
                self.accepted[d][r] += i in on_path

    def table(self) -> dict[int, list[float]]:
        """``{depth: [p by rank]}`` for the depths tried at all (what benches print)."""
        return {d: [round(self.p(d, r), 3) for r in range(self.max_rank)]
                for d in range(1, self.max_depth + 1) if sum(self.tried[d])}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ForwardCost:
    """``T(n)`` in seconds at measured sizes, linear in between and beyond the last."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    def __call__(self, n: int) -> float:
        i = bisect_left(self.sizes, n)
        if i < len(self.sizes) and self.sizes[i] == n:
            return self.seconds[i]
        if i == 0:
            return self.seconds[0]
        if i == len(self.sizes):
            i -= 1
        (n0, t0), (n1, t1) = (self.sizes[i - 1], self.seconds[i - 1]), (self.sizes[i], self.seconds[i])
        return t0 + (t1 - t0) * (n - n0) / (n1 - n0)

    def ratios(self) -> dict[int, float]:
        return {n: round(t / self.seconds[0], 3) for n, t in zip(self.sizes, self.seconds, strict=True)}


def shape_tree(
    root: int, trie: Trie, acceptance: Acceptance, cost: ForwardCost, *, max_nodes: int, width: int
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
    # the size that maximizes expected tokens per second; best-first order makes every prefix a tree
    best_n, best_rate, expected, gain = 1, 1.0 / cost(1), 0.0, 0.0
    for n in range(2, len(tokens) + 1):
        gain += probs[n - 1]
        rate = (1.0 + gain) / cost(n)
        if rate > best_rate:
            best_n, best_rate, expected = n, rate, gain
    tree = TokenTree(tuple(tokens[:best_n]), tuple(parents[:best_n]))
    return tree, ranks[:best_n], expected
