"""One question over a library, asked the one way ``minions ask --library`` and ``minions mcp`` ask it: the same
checks, then ``Library.ask``, whose protocol's channel records in the run's egress log whatever leaves the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minions.errors import ConfigError, MinionsError
from minions.protocols import RunResult, missing_remote, needs_remote
from minions.protocols.library import Library

__all__ = ["ask_library", "check_protocol"]


def check_protocol(name: str, remote: Any, how: str) -> None:
    """A ConfigError that says ``how`` to configure a remote model when protocol ``name`` needs one and there is
    none."""
    if remote is None and needs_remote(name):
        raise ConfigError(missing_remote(name, how))


def ask_library(
    library: Library, question: str, documents: Sequence[str] | None = None, *, events: Any = None
) -> RunResult:
    """Answer ``question`` from the whole library, or from the ``documents`` named in it (``Library.ask``); an
    empty question or an empty library is a MinionsError that says what to do."""
    if not question.strip():
        raise MinionsError("The question is empty: write what you want to know about the documents.")
    if not library.documents:
        raise MinionsError(
            f"The library {library.index.path} is empty: add documents with `minions index FILE|FOLDER...`."
        )
    return library.ask(question, list(documents or ()) or None, events=events)
