"""Work written as a generator of steps: it yields between two steps, so that a caller with other work (the
engine's worker thread, a benchmark running several engines in turn) does it between them, and returns its
result at the end. ``drain`` is the caller with nothing else to do."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar, cast

__all__ = ["drain"]

R = TypeVar("R")


def drain(steps: Generator[Any, None, R]) -> R:
    """What a generator of steps (``Engine.steps``, ``backends.speculation.depth.timed_rounds``) returns, all its
    steps taken at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast("R", done.value)
