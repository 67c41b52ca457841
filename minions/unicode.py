"""Text that every consumer can take: a tokenizer, SQLite, a file name, a JSON reply, the terminal.

A Python string may hold code points that no UTF-8 encoder accepts: surrogates (a JSON ``"\\ud800"`` escape, a
file name or command-line argument decoded with ``surrogateescape``, a careless PDF's text), and NUL, which ends
a C string or a file name. ``valid_text`` replaces each with U+FFFD and counts them, so the place that takes text
in (``Document``, a protocol's ``run``, the app's request bodies) can say how much it changed. The length stays
the same, so offsets into the text (pages, sections, quotes) still hold.
"""

from __future__ import annotations

import re

__all__ = ["REPLACEMENT", "replaced_note", "valid_text"]

REPLACEMENT = "\ufffd"
_INVALID = re.compile("[\x00\ud800-\udfff]")


def valid_text(text: str) -> tuple[str, int]:
    """``text`` with every surrogate and NUL replaced by U+FFFD, and how many were replaced."""
    fixed, n = _INVALID.subn(REPLACEMENT, text)
    return fixed, n


def replaced_note(n: int, where: str) -> str:
    """What a run's notes say about the ``n`` characters replaced in ``where`` (``the question``, ``a.txt``)."""
    what, are = ("character", "is") if n == 1 else ("characters", "are")
    return f"Replaced {n} {what} of {where} that {are} not valid Unicode (unpaired surrogates, NUL) with U+FFFD."
