"""Speculative decoding's llama.cpp parts; the rest, whichever engine, is ``backends.speculation``.

- ``cost``: this machine's cost table ``T`` of a decode call, measured once per model and cached;
- ``draft_model``: a second GGUF with the target's vocabulary, drafting greedily (``DraftModel``);
- ``bench``: ``minions bench speculative``.

The engine (``backends.llamacpp.scheduler``) asks its ``speculation.Speculator`` for drafts each decode step,
verifies every draft in its one call per step (``speculation.tree.accept``) and rolls back the rejected tokens'
KV cells.
"""

from __future__ import annotations

from .cost import load_or_measure_cost_table, measure_cost_table
from .draft_model import DraftModel

__all__ = ["DraftModel", "load_or_measure_cost_table", "measure_cost_table"]
