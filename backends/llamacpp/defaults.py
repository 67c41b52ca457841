"""The llama.cpp backend's defaults, in one place: the engine's config, the backend and the benchmarks read them."""

from __future__ import annotations

__all__ = ["DEFAULT_CONTEXT", "DEFAULT_MAX_SEQS"]

DEFAULT_CONTEXT = 8192
"""The most tokens one job (prompt and reply) may use."""
DEFAULT_MAX_SEQS = 8
"""Jobs decoded together."""
