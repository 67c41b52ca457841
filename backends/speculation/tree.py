"""Token trees and the acceptance rule of speculative decoding, as pure functions of token ids.

A ``TokenTree`` holds the last emitted token (node 0, the root) and drafted tokens below it; ``parents[i] < i``,
so nodes are in topological order. Plain decoding is the tree with only the root; a draft ``d[0..k-1]`` of one
sequence is a chain, the tree one wide (``TokenTree.chain(root, d)``).

A step verifies a tree: the target model runs once over its nodes and gives, for every node ``i``, the
next-token distribution ``p[i]`` after the root-to-``i`` path. ``accept`` emits between 1 and ``depth + 1`` tokens
per step and is *lossless*: the emitted tokens have exactly the distribution of plain decoding from ``p`` one
token at a time.

Sample-and-compare (deterministic drafts, any sampler): at the current node ``i`` (the root first) draw
``x ~ p[i]`` with the sequence's own sampler; if a child of ``i`` holds ``x``, accept it and go on from there;
else emit ``x`` and stop (the bonus token when ``i`` is a leaf). Each emitted token is one draw of the sampler
from the right distribution, in the same order as plain decoding, so with the same seed the output is identical
token for token; at temperature 0 the sampler is the argmax, and this is greedy verification. Every drafter
here drafts deterministically (lookups, traces, a draft model decoding greedily), so this one rule serves them
all, chains and trees alike (drafts are proposals picked without looking at the target, so checking a sample
against them changes nothing about the sample). (A deterministic draft is the point mass ``q = delta(d)``:
Leviathan/Chen rejection sampling with that ``q`` accepts with probability ``p(d)`` and otherwise samples ``p``
without ``d`` renormalised, the same distribution as drawing ``x ~ p`` and comparing. A drafter that sampled
its drafts from a distribution ``q`` would need that rule and its residual ``norm(max(p - q, 0))``.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["STRONG_MATCH", "TokenTree", "Trie", "accept", "tried"]


@dataclass(frozen=True, slots=True)
class TokenTree:
    tokens: tuple[int, ...]
    """Node ``i``'s token; node 0 is the root (the last emitted token)."""
    parents: tuple[int, ...]
    """Node ``i``'s parent; -1 for the root, else an earlier node."""

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents) or not self.tokens:
            raise ValueError("A token tree needs one parent per token and at least the root.")
        if self.parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(self.parents[1:], 1)):
            raise ValueError(f"parents must be -1 for the root and an earlier node for the others: {self.parents}")

    @classmethod
    def chain(cls, root: int, drafts: Sequence[int] = ()) -> TokenTree:
        return cls((root, *drafts), tuple(range(-1, len(drafts))))

    def __len__(self) -> int:
        return len(self.tokens)

    def depths(self) -> list[int]:
        d = [0] * len(self.parents)
        for i, p in enumerate(self.parents[1:], 1):
            d[i] = d[p] + 1
        return d

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in self.parents]
        for i, p in enumerate(self.parents[1:], 1):
            kids[p].append(i)
        return kids

    def paths(self) -> list[list[int]]:
        """Every root-to-leaf path, as node indices."""
        kids = self.children()
        out, stack = [], [[0]]
        while stack:
            path = stack.pop()
            if kids[path[-1]]:
                stack.extend([*path, c] for c in kids[path[-1]])
            else:
                out.append(path)
        return out


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


def accept(
    tree: TokenTree, sample: Callable[[int], int], emit: Callable[[int], bool] | None = None
) -> tuple[list[int], list[int]]:
    """Verify ``tree`` with the sequence's own sampler: ``sample(node)`` draws the token after ``node`` from
    ``p[node]`` (and advances the sampler's state, as plain decoding would; a grammar's matcher may advance too).
    ``emit(x)`` takes each emitted token in turn and returns False when the reply ended with it (end of
    generation, a stop string, the length limit): then nothing more is drawn, as plain decoding would draw nothing
    more.

    Returns ``(path, emitted)``: the accepted path (node indices, the root first; ``len(path) - 1`` drafts
    accepted) and the emitted tokens (``len(path)`` of them unless the reply ended on an accepted draft token);
    ``sample`` is called once per emitted token."""
    kids = tree.children()
    path, emitted = [0], []
    while True:
        x = sample(path[-1])  # x ~ p[node]: one draw per emitted token, as in plain decoding
        emitted.append(x)
        child = next((c for c in kids[path[-1]] if tree.tokens[c] == x), None)
        if child is not None:
            path.append(child)  # a draft equal to the draw is accepted (even when the reply ends with it)
        if (emit is not None and not emit(x)) or child is None:
            # the reply ended, or no child holds x (a leaf's bonus token): x is what plain decoding emits here
            return path, emitted


def tried(tree: TokenTree, path: Sequence[int]) -> list[tuple[int, bool]]:
    """The drafted nodes a verify step tested, and whether each was accepted: every node whose parent was
    accepted (the others were never reached). On a chain of ``k`` with ``m`` accepted: ``m`` successes and, if
    ``m < k``, one failure. Every acceptance estimate counts these."""
    on_path = set(path)
    return [(i, i in on_path) for i in range(1, len(tree)) if tree.parents[i] in on_path]
