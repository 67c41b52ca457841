"""The draft model an engine drafts with: a GGUF with the target's vocabulary that llama.cpp runs
(``llamacpp.draft_model.DraftModel``), whichever engine verifies. The llama.cpp engine makes its own; another
engine (``pytorch``) is given this loader, or one of its own (``TransformersBackend(draft_loader=...)``), and never
imports ``backends.llamacpp`` itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DraftLoader", "load_draft_model"]

DraftLoader = Callable[[Path, int, int], Any]
"""``(path, seq_ctx, n_threads) -> a draft model of one sequence``, as ``speculation.drafters.DraftTrees`` drives it."""


def load_draft_model(path: Path, seq_ctx: int, n_threads: int) -> Any:
    """``path`` as a llama.cpp draft model of one sequence of ``seq_ctx`` cells on ``n_threads`` threads."""
    from .llamacpp.draft_model import DraftModel

    return DraftModel(path, n_seqs=1, seq_ctx=seq_ctx, n_threads=n_threads)
