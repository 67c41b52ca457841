"""Where minions keeps its files (converted models, tokenizer files, the speculator's traces) and where it finds
benchmark data (``--data``, else ``$MINIONS_DATA``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from minions.errors import ConfigError

__all__ = ["DATA_ENV", "LIBRARY_ENV", "benchmark_data", "cache_dir", "library_dir", "writable_dir"]

DATA_ENV = "MINIONS_DATA"
"""A folder that holds the benchmarks' downloads side by side, one folder each (``financebench/``, ``leval/``, ...)."""


def cache_dir() -> Path:
    """``$MINIONS_CACHE_DIR``, else ``$XDG_CACHE_HOME/minions``, else ``~/.cache/minions``."""
    explicit = os.environ.get("MINIONS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "minions"


def writable_dir(path: Path, fix: str) -> Path:
    """``path``, created if need be, once a file can be written in it; else a ConfigError that says ``fix``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ConfigError(f"Cannot write to {path} ({exc.strerror or exc}): {fix}.") from exc
    return path


LIBRARY_ENV = "MINIONS_LIBRARY"


def library_dir() -> Path:
    """The default library (``minions index``, ``minions ask --library``): ``$MINIONS_LIBRARY``, else
    ``$XDG_DATA_HOME/minions/library``, else ``~/.local/share/minions/library``."""
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "minions" / "library"


def benchmark_data(name: str, given: str | os.PathLike[str] | None = None, *, expected: str = "") -> Path:
    """Where benchmark ``name``'s files are: ``given`` (what ``--data`` says), else ``$MINIONS_DATA/<name>``.
    With neither, a ``ConfigError`` that says what to pass (``expected``: what that folder holds)."""
    if given is not None and str(given):
        return Path(given)
    root = os.environ.get(DATA_ENV)
    if root:
        return Path(root) / name
    holds = f" ({expected})" if expected else ""
    raise ConfigError(
        f"No {name} data: pass --data PATH{holds}, or set {DATA_ENV} to the folder that holds {name}/ "
        "beside the other benchmarks' downloads."
    )
