"""Where minions keeps its files: converted models, tokenizer files, the speculator's traces."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "shared_data_dir"]


def cache_dir() -> Path:
    """``$MINIONS_CACHE_DIR``, else ``$XDG_CACHE_HOME/minions``, else ``~/.cache/minions``."""
    explicit = os.environ.get("MINIONS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "minions"


def shared_data_dir(name: str) -> str | None:
    """``../shared/data/<name>`` beside this checkout, where the benchmark files live, if present."""
    candidate = Path(__file__).resolve().parents[2] / "shared" / "data" / name
    return str(candidate) if candidate.is_dir() else None
