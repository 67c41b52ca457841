"""Replies that loop: a small model that starts repeating itself does not stop on its own."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

__all__ = ["REPEAT_MAX_PERIOD", "REPEAT_MIN_ITEMS", "repeating"]

REPEAT_MIN_ITEMS = 24
"""A reply whose last this-many tokens (or words) or more are one stretch repeated is looping."""
REPEAT_MAX_PERIOD = 16


def repeating(items: Sequence[Hashable], min_items: int = REPEAT_MIN_ITEMS) -> int:
    """The period of the loop ``items`` end in: the same stretch of 1 to ``REPEAT_MAX_PERIOD`` items, repeated
    over at least ``min_items`` items and at least 3 times; 0 when they end in none."""
    n = len(items)
    for period in range(1, REPEAT_MAX_PERIOD + 1):
        span = max(min_items, 3 * period)
        if span > n:
            break
        tail = items[n - span :]
        if all(tail[i] == tail[i - period] for i in range(period, span)):
            return period
    return 0
