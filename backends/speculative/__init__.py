"""Speculative decoding for the local engine: lossless, adaptive, learned from traffic.

- ``rules``: the acceptance rules (greedy, sample-and-compare, Leviathan/Chen rejection) as pure functions;
- ``drafters``: context lookup, the persistent trace cache, the per-schema (grammar) trace, a draft model;
- ``depth``: the measured cost curve ``T(n)``, acceptance tracking, and the draft length that maximises
  expected tokens per second;
- ``decoder``: a batched llama.cpp decoder that verifies every sequence's draft in one call per step and rolls
  back rejected tokens' KV cells;
- ``bench``: ``minions bench speculative``.
"""

from __future__ import annotations

from .depth import AcceptanceTracker, CostCurve, choose_depths, expected_tokens, load_or_measure_cost_curve
from .drafters import ContextLookup, Drafter, DraftModel, ScriptedDrafter, TraceCache
from .rules import (
    chi_square,
    chi_square_critical,
    greedy_accept,
    rejection_sample,
    residual,
    sample_compare,
)

__all__ = [
    "AcceptanceTracker",
    "ContextLookup",
    "CostCurve",
    "DraftModel",
    "Drafter",
    "ScriptedDrafter",
    "TraceCache",
    "chi_square",
    "chi_square_critical",
    "choose_depths",
    "expected_tokens",
    "greedy_accept",
    "load_or_measure_cost_curve",
    "rejection_sample",
    "residual",
    "sample_compare",
]
