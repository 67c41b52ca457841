"""The one way prompts are made: Jinja templates shipped in ``protocols/prompts``, rendered strictly."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

__all__ = ["render"]


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("minions.protocols", "prompts"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


def render(name: str, **values: Any) -> str:
    """Render ``prompts/<name>.j2``; a missing value raises instead of rendering as empty."""
    return _environment().get_template(f"{name}.j2").render(**values).strip()
