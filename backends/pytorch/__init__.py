"""The PyTorch backend: transformers models with token-tree speculation (``transformers/<GGUF or folder>``).

Importing this package imports torch; ``minions.backends.registry`` imports it only when a ``transformers/``
model is resolved, so nothing else pays for torch.
"""

from . import batched
from .backend import TransformersBackend, resolve_source
from .decode import Chooser, Decoded, JsonGrammar, Mode, SpecConfig, Speculation, generate, measure_cost
from .draft import Acceptance, ContextIndex, CostCurve, Trie, shape_tree
from .draft_model import Calibration, DraftTrees, best_first
from .hybrid import AttentionState, ReplayState, StateKeeper, has_recurrent_state, state_keeper
from .tree import TokenTree, ancestor_mask, keep_path, verify, walk

__all__ = [
    "Acceptance",
    "AttentionState",
    "Calibration",
    "Chooser",
    "ContextIndex",
    "CostCurve",
    "Decoded",
    "DraftTrees",
    "JsonGrammar",
    "Mode",
    "ReplayState",
    "SpecConfig",
    "Speculation",
    "StateKeeper",
    "TokenTree",
    "TransformersBackend",
    "Trie",
    "ancestor_mask",
    "batched",
    "best_first",
    "generate",
    "has_recurrent_state",
    "keep_path",
    "measure_cost",
    "resolve_source",
    "shape_tree",
    "state_keeper",
    "verify",
    "walk",
]
