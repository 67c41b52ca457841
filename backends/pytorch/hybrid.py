"""What a verify step keeps: attention KV along the accepted path, and for hybrid models the recurrent state.

- ``AttentionState``: every layer is attention; drop the rejected nodes' KV (``tree.keep_path``). Trees of any
  shape.
- ``ReplayState``: some layers carry a convolution or recurrent state (LFM2's short convolutions, Mamba-2's
  SSM). A verify step runs those layers over every drafted token and leaves their state after the last one;
  rejected drafts must not stay in it. Before each verify step the state is checkpointed (a few small tensors
  per layer: the last ``L`` conv inputs, the SSM state); after it, if some drafts were rejected, the checkpoint
  comes back, the attention KV is cut to the past, and the accepted tokens are replayed from there. The result
  is the state of step-by-step decoding by construction, for any recurrent layer. transformers' ``crop`` is not
  used: it cannot undo a recurrent update. A convolution or scan reads its inputs in order, not along tree
  edges, so these models verify chains (one child per node).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from .tree import TokenTree, keep_path

__all__ = ["AttentionState", "ReplayState", "StateKeeper", "has_recurrent_state", "state_keeper"]


class StateKeeper(Protocol):
    branching: bool
    """Whether trees may branch (False: chains only)."""

    def before(self, cache: Any) -> None: ...

    def commit(self, model: Any, cache: Any, past: int, tree: TokenTree, path: Sequence[int]) -> None: ...


class AttentionState:
    branching = True

    def before(self, cache: Any) -> None:
        pass

    def commit(self, model: Any, cache: Any, past: int, tree: TokenTree, path: Sequence[int]) -> None:
        keep_path(cache, past, path)


def _recurrent_layers(cache: Any) -> list[Any]:
    return [layer for layer in cache.layers if hasattr(layer, "conv_states") or hasattr(layer, "recurrent_states")]


def has_recurrent_state(model: Any) -> bool:
    """Whether ``model``'s cache holds convolution or recurrent state (a hybrid or state-space model)."""
    from transformers import DynamicCache

    return bool(_recurrent_layers(DynamicCache(config=model.config)))


class ReplayState:
    branching = False

    def __init__(self) -> None:
        self._saved: list[tuple[dict[int, torch.Tensor], dict[int, torch.Tensor], dict[int, bool]]] = []
        self.replayed = 0
        """Tokens run a second time to roll the state back (the cost of rollback)."""

    @torch.inference_mode()
    def before(self, cache: Any) -> None:
        self._saved = []
        for layer in _recurrent_layers(cache):
            conv = {i: s.clone() for i, s in getattr(layer, "conv_states", {}).items() if s is not None}
            rec = {i: s.clone() for i, s in getattr(layer, "recurrent_states", {}).items() if s is not None}
            self._saved.append((conv, rec, dict(layer.has_previous_state)))

    @torch.inference_mode()
    def _restore(self, cache: Any) -> None:
        for layer, (conv, rec, had) in zip(_recurrent_layers(cache), self._saved, strict=True):
            for i, s in conv.items():
                layer.conv_states[i].copy_(s)
            for i, s in rec.items():
                layer.recurrent_states[i].copy_(s)
            layer.has_previous_state.update(had)

    def commit(self, model: Any, cache: Any, past: int, tree: TokenTree, path: Sequence[int]) -> None:
        if list(path) == list(range(len(tree))):  # every node accepted: the state is already the right one
            return
        self._restore(cache)
        keep_path(cache, past, [])
        tokens = [tree.tokens[i] for i in path]
        with torch.inference_mode():
            ids = torch.tensor([tokens], device=model.device)
            positions = torch.arange(past, past + len(tokens), device=model.device)[None]
            model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True)
        self.replayed += len(tokens)


def state_keeper(model: Any) -> StateKeeper:
    return ReplayState() if has_recurrent_state(model) else AttentionState()
