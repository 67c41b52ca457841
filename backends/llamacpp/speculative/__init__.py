"""Speculative decoding for the local engine: lossless, adaptive, learned from traffic.

- ``rules``: the acceptance rule (sample-and-compare: greedy at temperature 0) as a pure function;
- ``drafters``: context lookup, the persistent trace cache, the per-schema (grammar) trace, a draft model;
- ``depth``: the measured cost curve ``T(n)``, acceptance tracking, and the draft length that maximises
  expected tokens per second;
- ``speculator``: what the engine (``backends.llamacpp.scheduler``) asks each decode step: a draft per generating
  sequence, cut to the depth that pays; the engine verifies every draft in its one call per step and rolls
  back the rejected tokens' KV cells;
- ``bench``: ``minions bench speculative``.
"""

from __future__ import annotations

from .depth import (
    AcceptanceTracker,
    CallCost,
    CostCurve,
    CostTable,
    choose_depths,
    expected_tokens,
    load_or_measure_cost_table,
)
from .drafters import ContextLookup, Drafter, DraftModel, ScriptedDrafter, TraceCache
from .rules import sample_compare
from .speculator import Draft, DraftStats, Speculator, default_drafters

__all__ = [
    "AcceptanceTracker",
    "CallCost",
    "ContextLookup",
    "CostCurve",
    "CostTable",
    "Draft",
    "DraftModel",
    "DraftStats",
    "Drafter",
    "ScriptedDrafter",
    "Speculator",
    "TraceCache",
    "choose_depths",
    "default_drafters",
    "expected_tokens",
    "load_or_measure_cost_table",
    "sample_compare",
]
