"""Gold evidence: where a benchmark says the answer to a question lies, and how loaders find that text.

A ``GoldEvidence`` is one place in one of an item's documents: its pages (1-based, as ``Page.number`` in
``minions.documents``), a character span of the document's text, and/or the text itself. An item holds one set
of places per annotator (QASPER asks several; the other benchmarks have one set, or none).

Benchmarks quote their evidence with small differences from the document's text (spacing, line breaks,
hyphenation): ``Locator`` finds a quote verbatim, else with case, spacing and punctuation ignored; ``share_in``
says how much of a quote's wording (its word trigrams) a text holds, for quotes that were edited more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache

__all__ = [
    "MIN_LOCATED_CHARS",
    "EvidenceSet",
    "GoldEvidence",
    "Locator",
    "one_annotator",
    "share_in",
    "trigrams",
    "words",
]

MIN_LOCATED_CHARS = 12
"""A quote shorter than this (in letters and digits) is never looked up loosely: it would match anywhere."""


@dataclass(frozen=True)
class GoldEvidence:
    """One place where the answer lies (or, for ``EvalItem.paragraphs``, one paragraph of a document)."""

    document: str
    """``Document.name`` of the item's document it lies in."""
    text: str = ""
    start: int | None = None
    """Character offsets in the document's text; None where the benchmark gives none or the text was not found."""
    end: int | None = None
    pages: tuple[int, ...] = ()
    """1-based page numbers; empty for documents without pages."""


EvidenceSet = tuple[GoldEvidence, ...]
"""One annotator's gold evidence for an item (empty: this annotator marked none in the text)."""


def one_annotator(places: EvidenceSet) -> tuple[EvidenceSet, ...]:
    """An item's evidence where the benchmark has one annotator: one set, or none when it marks nothing."""
    return (places,) if places else ()


class Locator:
    """Finds quotes in ``text``: verbatim, else ignoring case and everything but letters and digits."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def _folded(self) -> tuple[str, list[int]]:
        """The text lowercased with only its letters and digits kept, and where each kept one is in ``text``."""
        offsets = [i for i, ch in enumerate(self.text) if ch.isalnum()]
        return "".join(self.text[i] for i in offsets).lower(), offsets

    def find(self, quote: str) -> tuple[int, int] | None:
        """``(start, end)`` of ``quote`` in the text (its first occurrence), or None. A loose match spans from
        its first letter or digit to its last."""
        quote = quote.strip()
        if not quote:
            return None
        at = self.text.find(quote)
        if at >= 0:
            return at, at + len(quote)
        key = "".join(ch for ch in quote if ch.isalnum()).lower()
        if len(key) < MIN_LOCATED_CHARS:
            return None
        folded, offsets = self._folded
        at = folded.find(key)
        if at < 0:
            return None
        return offsets[at], offsets[at + len(key) - 1] + 1


_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The lowercased words (runs of letters and digits) of ``text``."""
    return _WORD.findall(text.lower())


_CACHED_CHARS = 20_000
"""Texts up to this long keep their trigrams in a bounded cache (a passage is compared with every gold place);
whole documents are not kept."""


def trigrams(text: str) -> frozenset[tuple[str, ...]]:
    """The word trigrams of ``text`` (its words as one tuple when it has fewer than three)."""
    return _cached_trigrams(text) if len(text) <= _CACHED_CHARS else _trigrams(text)


def _trigrams(text: str) -> frozenset[tuple[str, ...]]:
    w = words(text)
    if len(w) < 3:
        return frozenset({tuple(w)}) if w else frozenset()
    return frozenset(zip(w, w[1:], w[2:], strict=False))


_cached_trigrams = lru_cache(maxsize=1024)(_trigrams)


def share_in(quote: str, text: str) -> float:
    """The share of ``quote``'s word trigrams that ``text`` holds (0 for a quote without words)."""
    ours = trigrams(quote)
    return len(ours & trigrams(text)) / len(ours) if ours else 0.0
