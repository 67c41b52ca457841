"""Token trees: many drafted continuations verified in one forward pass, the accepted path's KV kept.

A ``TokenTree`` holds the last emitted token (node 0, the root, not yet in the KV cache) and drafted tokens
below it; ``parents[i] < i``, so nodes are in topological order. Plain decoding is the tree with only the root,
chain speculation a tree whose nodes each have one child.

One verify step::

    logits = verify(model, cache, tree)       # [n, V]: logits[i] predicts the token after node i
    path, nxt = walk(tree, logits, choose)    # the accepted root-to-node path, and the target's next token
    keep_path(cache, past, path)              # the cache holds the prompt, the root and the accepted drafts

Node ``i`` sits at position ``past + depth(i)`` and attends to the whole past and to its own ancestors (and
itself), so ``logits[i]`` are those of sequential decoding of the root-to-``i`` path (tests check every path).
``walk`` moves from the root to the child whose token the target chooses, and stops at the first node where
the target's choice has no drafted child: the choice is emitted then. With greedy ``choose`` the output is
plain greedy decoding's, token for token; with a sampling ``choose`` every emitted token is a sample of the
target's distribution given what precedes it (drafts are proposals picked without looking at the target, so
checking a sample against them changes nothing about the sample), so sampled decoding is lossless too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["TokenTree", "additive", "ancestor_mask", "ancestors", "keep_path", "verify", "walk"]


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


def ancestors(tree: TokenTree) -> torch.Tensor:
    """Boolean ``[n, n]``: True where node ``i`` may attend to node ``j`` (its ancestors and itself)."""
    n = len(tree)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(tree.parents):
        allowed[i, i] = True
        if p >= 0:  # a node sees what its parent sees (parents come first)
            allowed[i, :i] |= allowed[p, :i]
    return allowed


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An attention mask from a boolean one: 0 where attending is allowed, the dtype's minimum elsewhere."""
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask


def ancestor_mask(tree: TokenTree, past: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask ``[1, 1, n, past + n]``: 0 where node ``i`` may attend (the past, its ancestors, itself),
    the dtype's minimum elsewhere."""
    n = len(tree)
    allowed = torch.ones(n, past + n, dtype=torch.bool)
    allowed[:, past:] = ancestors(tree)
    return additive(allowed, dtype)[None, None]


@torch.inference_mode()
def verify(model: Any, cache: Any, tree: TokenTree, past: int) -> torch.Tensor:
    """One forward over the tree's nodes on top of ``past`` cached tokens; logits ``[n, V]`` (float32, CPU).

    The cache grows by ``n`` entries in node order; ``keep_path`` drops the rejected ones.
    """
    device = next(model.parameters()).device
    ids = torch.tensor([tree.tokens], device=device)  # [1, n]
    positions = torch.tensor([[past + d for d in tree.depths()]], device=device)  # [1, n]
    # a chain is causal: the model's own mask does (and models with convolution layers need it)
    chain = all(p == i - 1 for i, p in enumerate(tree.parents))
    mask = None if chain else ancestor_mask(tree, past, model.dtype).to(device)  # [1, 1, n, past + n]
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True)
    return out.logits[0].float().cpu()  # the walk reads them node by node


Choose = Callable[[int, torch.Tensor], int]
"""``choose(node, logits)``: the target's token after ``node`` (greedy, sampled, grammar-masked, ...). It is
called once per node on the accepted path, in order, so a stateful chooser (a grammar matcher) may advance."""


def walk(
    tree: TokenTree, logits: torch.Tensor, choose: Choose, stop: Callable[[int], bool] | None = None
) -> tuple[list[int], int]:
    """The accepted path (node indices, the root first) and the target's token after its last node.

    ``stop(token)``: the target chose an end (end of generation, a grammar's end); the walk ends there.
    """
    kids = tree.children()
    path = [0]
    while True:
        token = choose(path[-1], logits[path[-1]])
        nxt = next((c for c in kids[path[-1]] if tree.tokens[c] == token), None)
        if nxt is None or (stop is not None and stop(token)):
            return path, token
        path.append(nxt)


@torch.inference_mode()
def keep_path(cache: Any, past: int, path: Sequence[int]) -> None:
    """Keep the first ``past`` cached positions and the tree nodes on ``path``; drop the other tree nodes.

    Works on attention layers (``keys``/``values`` ``[batch, heads, seq, dim]``). Recurrent and convolution
    state cannot be cut this way; ``hybrid.py`` rolls those back.
    """
    n_path = len(path)
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if keys is None or keys.numel() == 0 or keys.shape[-2] <= past:
            continue
        if list(path) == list(range(n_path)):  # a chain prefix: a slice, no copy
            layer.keys = keys[..., : past + n_path, :]
            layer.values = layer.values[..., : past + n_path, :]
            continue
        # only the tail moves: the path's entries gathered, written over the tree's first places, the rest cut
        index = torch.tensor([past + i for i in path], device=keys.device)
        for name in ("keys", "values"):
            cached = getattr(layer, name)
            cached[..., past : past + n_path, :] = cached.index_select(-2, index)
            setattr(layer, name, cached[..., : past + n_path, :])
