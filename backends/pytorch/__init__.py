"""The PyTorch backend: transformers models with token-tree speculation (``transformers/<GGUF or folder>``).

Its names load on first use, with torch: ``minions.backends.registry`` resolves a ``transformers/`` model only
when one is named, and the CLI reads ``bench.TreeBenchConfig``'s defaults without torch, so an install without
the ``pytorch`` extra runs everything else.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import batched
    from .backend import TransformersBackend, resolve_source
    from .decode import Chooser, Decoded, JsonGrammar, Mode, SpecConfig, Speculation, generate, measure_cost
    from .hybrid import AttentionState, ReplayState, StateKeeper, has_recurrent_state, state_keeper
    from .tree import ancestor_mask, keep_path, verify

_MODULES = {
    "backend": ("TransformersBackend", "resolve_source"),
    "decode": ("Chooser", "Decoded", "JsonGrammar", "Mode", "SpecConfig", "Speculation", "generate", "measure_cost"),
    "hybrid": ("AttentionState", "ReplayState", "StateKeeper", "has_recurrent_state", "state_keeper"),
    "tree": ("ancestor_mask", "keep_path", "verify"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name == "batched":
        return importlib.import_module(f"{__name__}.batched")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AttentionState",
    "Chooser",
    "Decoded",
    "JsonGrammar",
    "Mode",
    "ReplayState",
    "SpecConfig",
    "Speculation",
    "StateKeeper",
    "TransformersBackend",
    "ancestor_mask",
    "batched",
    "generate",
    "has_recurrent_state",
    "keep_path",
    "measure_cost",
    "resolve_source",
    "state_keeper",
    "verify",
]
