"""The one way prompts are made: Jinja templates shipped as package data (``protocols/prompts``, and
``evals/prompts`` for the evaluation's judge), rendered strictly."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

__all__ = ["render"]


@cache
def _environment(package: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, "prompts"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


def render(name: str, *, package: str = "minions.protocols", **values: Any) -> str:
    """Render ``<package>/prompts/<name>.j2``; a missing value raises instead of rendering as empty."""
    return _environment(package).get_template(f"{name}.j2").render(**values).strip()
