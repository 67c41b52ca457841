"""Speculative decoding, whichever engine runs the model: no llama.cpp and no torch in here.

- ``tree``: token trees (a chain is a tree one wide) and the acceptance rule over them (``accept``: lossless,
  greedy at temperature 0, the sequence's own sampler otherwise);
- ``drafters``: the ``Drafter`` protocol (what a drafter does, and what it needs), the job's own text
  (``ContextIndex``: a chain or a trie), the persistent trace cache, the per-schema (grammar) trace and a draft
  model's trees (``DraftTrees``);
- ``depth``: the cost of a call (``CostCurve``, ``CostTable``, ``CallCost``), acceptance estimates, and the
  draft lengths and tree shapes that maximise expected tokens per second;
- ``speculator``: what an engine asks each decode step (``Speculator``, or a ``NullSpeculator`` that never
  drafts), the speed gate, and a job's draft statistics.

The llama.cpp engine (``backends.llamacpp``: its cost table and draft model in ``backends.llamacpp.cost_table`` and
``backends.llamacpp.draft_model``) and the PyTorch backend (``backends.pytorch``) draft, verify and learn with these;
each runs its own model call.
"""

from __future__ import annotations

from .depth import (
    Acceptance,
    AcceptanceTracker,
    Calibration,
    CallCost,
    CostCurve,
    CostTable,
    best_first,
    choose_depths,
    expected_tokens,
    shape_tree,
)
from .drafters import ContextIndex, ContextLookup, Drafter, DrafterBase, DraftTrees, ScriptedDrafter, TraceCache
from .speculator import K_MAX, NO_DRAFT, Draft, DraftStats, NullSpeculator, Speculator, SpeedGate, default_drafters
from .tree import TokenTree, accept, tried

__all__ = [
    "K_MAX",
    "NO_DRAFT",
    "Acceptance",
    "AcceptanceTracker",
    "Calibration",
    "CallCost",
    "ContextIndex",
    "ContextLookup",
    "CostCurve",
    "CostTable",
    "Draft",
    "DraftStats",
    "DraftTrees",
    "Drafter",
    "DrafterBase",
    "NullSpeculator",
    "ScriptedDrafter",
    "Speculator",
    "SpeedGate",
    "TokenTree",
    "TraceCache",
    "accept",
    "best_first",
    "choose_depths",
    "default_drafters",
    "expected_tokens",
    "shape_tree",
    "tried",
]
