"""A benchmark's options, declared once: on its config dataclass.

A field that ``minions bench NAME`` takes as an option is made with ``option(default, help)``; the CLI derives the
option from the field (``apps.cli.bench.add_config_options``: its name, type, default and choices) and builds the
config from what was given (``config_from``). A field made with plain ``=`` is not an option. Adding a benchmark
is then its config, its function and one parser of a few lines; a default lives in the field alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["OPTION", "Option", "option"]

OPTION = "option"
"""The key of a field's ``Option`` in its metadata."""


@dataclass(frozen=True, slots=True)
class Option:
    """How a config field reads as a command-line option."""

    help: str
    flag: str | None = None
    """The option's name where it is not the field's (``--id`` for ``ids``, ``--no-scores`` for a field that
    defaults to True: the flag sets the other value)."""
    metavar: str | None = None
    shown: str | None = None
    """The default as the help says it, where its value alone does not ("all cores" for None)."""
    choices: tuple[str, ...] | None = None
    """The values allowed, where the field's type does not say them (a ``Literal`` does)."""
    repeat: bool = False
    """A tuple field given once per value (``--id a --id b``); otherwise its values follow one flag."""
    required: bool = False


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    shown: str | None = None,
    choices: tuple[str, ...] | None = None,
    repeat: bool = False,
    required: bool = False,
) -> Any:
    """A config field with ``default`` that the CLI offers as an option (``shown``: the default as its help says
    it, where the value alone does not)."""
    spec = Option(help, flag, metavar, shown, choices, repeat, required)
    return field(default=default, metadata={OPTION: spec})
