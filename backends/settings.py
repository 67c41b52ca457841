"""Numbers that backends read from the environment, checked the same way: a bad value says what to set."""

from __future__ import annotations

import os

from minions.errors import ConfigError

__all__ = ["count_from_env", "cpu_threads"]


def cpu_threads(n_threads: int | None = None) -> int:
    """``n_threads``, else every core of this machine: the one default for the CPU threads a model runs on."""
    return n_threads or os.cpu_count() or 1


def count_from_env(name: str, default: int, what: str) -> int:
    """The positive whole number in the variable ``name`` (``what`` it counts, for the message), else ``default``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{name}={value!r} is not a number of {what}: set it to one, e.g. {default}.")
    return int(value)
