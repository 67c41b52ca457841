"""Token trees in PyTorch: many drafted continuations verified in one forward pass, the accepted path's KV kept.

A ``speculation.TokenTree``'s root (node 0) is the last emitted token, not yet in the KV cache. One verify
step::

    logits = verify(model, cache, tree, past)                       # [n, V]: logits[i] after node i
    path, emitted = accept(tree, lambda i: choose(i, logits[i]))    # speculation.tree: the rule
    keep_path(cache, past, path)            # the cache holds the prompt, the root and the accepted drafts

Node ``i`` sits at position ``past + depth(i)`` and attends to the whole past and to its own ancestors (and
itself), so ``logits[i]`` are those of sequential decoding of the root-to-``i`` path (tests check every path).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..speculation.tree import TokenTree

__all__ = ["additive", "ancestor_mask", "ancestors", "keep_path", "verify"]


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
