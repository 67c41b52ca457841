"""``get_protocol(name, local, remote, **options)``: the one place protocol names are spelled."""

from __future__ import annotations

from typing import Any

from minions.backends.base import Backend

from .base import BaseProtocol
from .baselines import RAG, RemoteOnly
from .local import LocalOnly
from .minion import Minion
from .minions_protocol import Minions
from .options import InputError

__all__ = ["PROTOCOLS", "get_protocol"]

PROTOCOLS: dict[str, type[BaseProtocol]] = {
    "minions": Minions,
    "minion": Minion,
    "remote": RemoteOnly,
    "local": LocalOnly,
    "rag": RAG,
}


def get_protocol(name: str, local: Backend | str, remote: Backend | str | None = None, **options: Any) -> BaseProtocol:
    """A protocol by name: minions, minion, remote, local or rag."""
    cls = PROTOCOLS.get(name.strip().lower())
    if cls is None:
        raise InputError(f"Unknown protocol {name!r}: use one of {', '.join(sorted(PROTOCOLS))}.")
    return cls(local, remote, **options)
