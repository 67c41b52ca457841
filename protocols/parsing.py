"""Reading JSON out of model replies, robustly: small local models wrap it in prose, fences and junk."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["as_answer", "extract_json", "normalize", "salvage_fields"]

_NO_ANSWER = {"", "null", "none", "n/a", "na", "unknown", "not found", "not mentioned", "no answer", "...", "…"}


def _objects(text: str) -> list[str]:
    """Balanced ``{...}`` spans of ``text``, outermost first, honouring strings and escapes."""
    spans, depth, start, in_string, escaped = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"' and depth > 0:
            in_string = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def extract_json(text: str) -> dict[str, Any]:
    """The first JSON object in ``text``. Raises ValueError (with a message a model can act on) when none."""
    for span in _objects(text):
        try:
            value = json.loads(span, strict=False)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("the reply contains no valid JSON object")


def as_answer(value: Any) -> str | None:
    """A job's answer as text, or None when it says there is none ("null", "none", "", ...)."""
    if value is None or isinstance(value, bool | dict):
        return None
    if isinstance(value, list):
        parts = [a for a in (as_answer(v) for v in value) if a]
        return "; ".join(parts) or None
    text = str(value).strip()
    return None if text.lower().strip(" .") in _NO_ANSWER else text


def normalize(text: str) -> str:
    """Lower case, straight quotes, single spaces: the form in which citations are compared."""
    text = text.lower().replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"\s+", " ", text).strip()


def salvage_fields(text: str, names: tuple[str, ...]) -> dict[str, str]:
    """String fields read from a JSON object cut short (a reply that ran out of tokens): ``"name": "value``
    up to its closing quote or the end of the text. Empty when none of ``names`` is there."""
    out = {}
    for name in names:
        m = re.search(rf'"{re.escape(name)}"\s*:\s*"((?:[^"\\]|\\.)*)', text)
        if m:
            out[name] = m.group(1).replace('\\"', '"').replace("\\n", "\n").strip()
    return out
