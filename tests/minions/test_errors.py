"""The exception tree drawn at the top of ``minions/errors.py`` is the tree of its classes."""

from __future__ import annotations

import re

from minions import errors
from minions.errors import BackendError, MinionsError, ModelOutputError

_BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def drawn_parents() -> dict[str, str]:
    """Each class the docstring draws, with the class drawn above it one level up."""
    assert errors.__doc__
    stack, parents = ["MinionsError"], {}
    for line in errors.__doc__.splitlines():
        m = _BRANCH.match(line.removeprefix("    "))
        if m is None:
            continue
        depth = len(m["indent"]) // 4 + 1
        del stack[depth:]
        parents[m["name"]] = stack[-1]
        stack.append(m["name"])
    return parents


def test_every_public_error_sits_where_the_tree_draws_it() -> None:
    parents = drawn_parents()
    public = {name for name in errors.__all__ if name != "MinionsError"}
    assert set(parents) == public
    for name, parent in parents.items():
        cls = getattr(errors, name)
        drawn = getattr(errors, parent)
        assert issubclass(cls, drawn), f"{name} is drawn under {parent}"
        # the nearest public ancestor is the one drawn (a private base may sit between)
        nearest = next(base for base in cls.__mro__[1:] if base.__name__ in parents or base is MinionsError)
        assert nearest is drawn, f"{name}'s parent is {nearest.__name__}, drawn {parent}"


def test_a_model_that_writes_nonsense_is_not_a_backend_that_failed() -> None:
    error = ModelOutputError("the plan did not validate", backend="openai/x", attempts=3, raw="{")
    assert not isinstance(error, BackendError) and isinstance(error, MinionsError)
    assert (error.backend, error.attempts, error.raw, error.usage) == ("openai/x", 3, "{", None)
