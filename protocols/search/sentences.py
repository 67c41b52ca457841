"""A text's sentences: the spans a quote is chosen among (``evidence.quotes``) and a chunk's sentences are weighed
by (``meaning.by_sentence``).

A span is a sentence or a line: a short line (a heading, a row's label) joins the text after it, a line of figures
joins the line before it (a table row: its label, then its values), prose wrapped at the page width goes on past
its line breaks, and a long span is cut at whitespace. Languages that end sentences with ".", "!" or "?".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .figures import figure_share

__all__ = ["MAX_SPAN_CHARS", "WRAPPED_LINE", "Span", "spans"]

MAX_SPAN_CHARS = 280
MIN_SPAN_CHARS = 40
"""A shorter line joins the text after it; where a long span is cut, no piece is shorter than this."""
FIGURE_LINE = 0.6
"""A line at least this share of whose tokens are figures is the values of the line before it."""
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=\S)|(?<=[a-z0-9%][.!?])(?=[A-Z][a-z])")
"""Where a sentence ends: after its full stop and the space that follows; or where the space is missing and a
capitalised word follows at once ("... to OEMs.We can't", as lines joined by a transcript's or a PDF's text
often are), not after a capital ("U.S.Bank")."""
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Inc|Ltd|Co|Corp|No|Nos|Fig|Figs|Eq|Vol|vs|al|approx|e\.g|i\.e|etc)|\b[A-Z])\.$"
)
"""Words whose full stop does not end a sentence ("Mr. Williams", "e.g. this", "J. Smith")."""
_NEW_ITEM = re.compile(r"[ \t]*(?:[|*•#>-]|\d+[.)][ \t])")
WRAPPED_LINE = 50
"""A line at least this long, followed by one line break, is prose wrapped at the page width: the sentence goes
on. Shorter lines (headings, table cells) and lines followed by a list or table item end a piece."""


@dataclass(frozen=True)
class Span:
    """A stretch of a chunk's text: ``text`` is ``chunk.text[start:end]`` with its whitespace collapsed."""

    start: int
    end: int
    text: str


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _line_breaks(text: str) -> list[tuple[int, int]]:
    """(start, end) of the line breaks that end a piece: blank lines, and single breaks after a short line or
    before a list or table item."""
    out = []
    for m in re.finditer(r"\n(?:[ \t]*\n)*", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        blank = m.group(0).count("\n") > 1
        short = len(text[line_start : m.start()].strip()) < WRAPPED_LINE
        if blank or short or _NEW_ITEM.match(text, m.end()):
            out.append((m.start(), m.end()))
    return out


def _pieces(text: str) -> list[tuple[int, int]]:
    """Sentences, lines and table cells of ``text`` as (start, end), stripped, none empty."""
    ends = [(m.start(), m.end()) for m in _SENTENCE_END.finditer(text) if not _ABBREVIATION.search(text, 0, m.start())]
    breaks = sorted([*_line_breaks(text), *ends])
    out, at = [], 0
    for start, end in [*breaks, (len(text), len(text))]:
        if start < at:
            continue
        piece = text[at:start]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            out.append((at + lead, at + len(piece.rstrip())))
        at = end
    return out


def _cut(start: int, end: int, text: str) -> list[tuple[int, int]]:
    """(start, end) cut at whitespace into stretches of at most ``MAX_SPAN_CHARS``."""
    out = []
    while end - start > MAX_SPAN_CHARS:
        cut = text.rfind(" ", start + MIN_SPAN_CHARS, start + MAX_SPAN_CHARS)
        cut = cut if cut > start else start + MAX_SPAN_CHARS
        out.append((start, cut))
        start = cut + (text[cut : cut + 1] == " ")
    return [*out, (start, end)]


def _leads(piece: str) -> bool:
    """A short line that is not a sentence (a heading, a label) introduces what follows it."""
    flat = _collapse(piece)
    return len(flat) < MIN_SPAN_CHARS and not flat.rstrip("*_ ").endswith((".", "!", "?"))


def spans(text: str) -> list[Span]:
    """``text`` as quotable spans: sentences and lines; a short line (a heading, a row's label) joins the text after
    it, and a line of figures joins the line before it (a table row: its label, then its values); long spans are
    cut; each at most ``MAX_SPAN_CHARS`` characters once its whitespace is collapsed."""
    merged: list[tuple[int, int]] = []
    lead = False  # the last span is a short line that introduces the next one
    for start, end in _pieces(text):
        if merged and (lead or figure_share(text[start:end]) >= FIGURE_LINE):
            s0, _ = merged[-1]
            if len(_collapse(text[s0:end])) <= MAX_SPAN_CHARS:
                merged[-1] = (s0, end)
                lead = _leads(text[s0:end])
                continue
        merged.append((start, end))
        lead = _leads(text[start:end])
    return [Span(s, e, _collapse(text[s:e])) for start, end in merged for s, e in _cut(start, end, text)]
