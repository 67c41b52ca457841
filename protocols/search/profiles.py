"""Domain knowledge as profiles: what a kind of document adds to the general core of search, and only to it.

The core ranks every library alike: words of any language (``search.words``), BM25, meaning, pages and repeats
spread, and a prior for passages dense in figures when a question asks for a quantity in any of the core's
languages ("how much", "wie viel", a unit, a currency sign: ``QUANTITY``). A profile adds knowledge where its
documents are:

    filings   companies' financial reports: SEC filings, earnings releases, annual and quarterly reports, told by
              their first page (the form's name and the commission's; a headline that reports a quarter's or a
              year's results, or names an annual or quarterly report, and money on the page: ``is_filing``).
              Their routing reads form, period and a dated 8-K off the cover (``search.routing``); a question
              that reaches them is expanded by the analysts' glossary (``search.glossary``) and its finance
              words ("revenue", "capex") ask for a quantity.

Nothing of the filings profile fires on a paper, a licence, a manual or a German document. A user's own glossary
(``Glossary.load``: a JSON file beside the index, or ``Library(glossary=...)``) applies to every question of their
library. ``Knowledge`` is what the documents a question can reach add up to: their languages, the glossary entries
and the quantity words that apply.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minions.documents import Document
from minions.errors import ConfigError

from .glossary import GLOSSARY
from .words import DEFAULT_LANGUAGE, detect

__all__ = [
    "FILINGS",
    "GENERAL",
    "QUANTITY",
    "Glossary",
    "Knowledge",
    "describe",
    "is_filing",
    "knowledge_of",
    "languages",
]

FILINGS = "filing"
"""The kind of a document the filings profile applies to (``describe``'s ``kind``)."""
QUANTITY = re.compile(
    r"\b(?:how (?:much|many)|amount|total|ratio|percent(?:age)?|rates?|average|number of|change|increase|decrease|"
    r"growth|usd|dollars?|euros?|millions?|billions?|"
    r"wie ?viele?|anzahl|betrag|summe|prozent|durchschnitt|"
    r"combien|montant|nombre de|pourcentage|taux|moyenne|"
    r"cu[aá]nt[oa]s?|cantidad|n[uú]mero de|porcentaje|promedio|"
    r"quant[oia]|quantos?|quantas?|percentuale|media|hoeveel|aantal|gemiddeld|hur m[aå]nga?)\b|[%$€£¥]",
    re.IGNORECASE,
)
"""A question that asks for an amount, a rate or a count, in the core's languages (a unit, a currency sign, "how
much"): its answer is likely a figure."""
FINANCE_QUANTITY = re.compile(
    r"\b(?:revenues?|income|expenses?|costs?|capex|expenditures?|cash|debt|assets|liabilities|eps|earnings|sales|"
    r"profits?|dividends?|shares|price|margin)\b",
    re.IGNORECASE,
)
"""The filings profile's words that ask for a figure ("What was 3M's capex?")."""

_SPACE = re.compile(r"\s+")
_SEC_FORM = re.compile(r"\bform\s+(?:10-k|10-q|8-k|20-f|6-k|40-f)\b", re.IGNORECASE)
_COMMISSION = re.compile(r"securities\s+and\s+exchange\s+commission", re.IGNORECASE)
_RELEASE = re.compile(
    r"\b(?:reports?|announces?)\b.{0,80}\b(?:quarter|fiscal|full[- ]year)\b.{0,80}\bresults\b"
    r"|\bfor immediate release\b",
    re.IGNORECASE,
)
_PERIOD = re.compile(r"\b(?:quarter|fiscal|full[- ]year)\b", re.IGNORECASE)
_REPORT = re.compile(r"\b(?:annual|quarterly|interim|half[- ]year(?:ly)?) (?:financial )?report\b", re.IGNORECASE)
_MONEY = re.compile(r"[$€£]\s?\d|\beps\b|\bnet (?:sales|income|revenues?)\b", re.IGNORECASE)
COVER_CHARS = 3000
"""How much of a document's opening text tells its kind (a filing's cover page fits)."""
RELEASE_CHARS = 600
"""Where an earnings release says what it reports: its headline."""


def is_filing(text: str) -> bool:
    """Whether ``text`` (a document's, from its start) is a company's financial report: an SEC filing (its cover
    names the form and the commission), an earnings release (its headline reports a quarter's or a year's
    results) or an annual, quarterly or interim report (its headline says so); a release or a report states
    money on its first page."""
    cover = _SPACE.sub(" ", text[:COVER_CHARS])
    if _SEC_FORM.search(cover) and _COMMISSION.search(cover):
        return True
    head = cover[:RELEASE_CHARS]
    released = bool(_RELEASE.search(head) and _PERIOD.search(head))
    return (released or _REPORT.search(head) is not None) and _MONEY.search(cover) is not None


def describe(doc: Document) -> dict[str, Any]:
    """What the core knows of ``doc`` before routing: its ``language`` and its ``kind`` (``FILINGS`` or
    "document")."""
    return {"language": detect(doc.text), "kind": FILINGS if is_filing(doc.text) else "document"}


@dataclass(frozen=True)
class Glossary:
    """Entries (a pattern over the question, case-insensitive; the words it adds to the terms searched)."""

    entries: tuple[tuple[str, str], ...] = ()
    _compiled: tuple[tuple[re.Pattern[str], str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            compiled = tuple((re.compile(p, re.IGNORECASE), words) for p, words in self.entries)
        except re.error as exc:
            raise ConfigError(f"A glossary pattern is not a regular expression: {exc}") from exc
        object.__setattr__(self, "_compiled", compiled)

    def __add__(self, other: Glossary) -> Glossary:
        return Glossary(tuple(dict.fromkeys(self.entries + other.entries)))

    def expand(self, question: str) -> str:
        """The words of the entries ``question`` names ("" when it names none)."""
        return " ".join(words for pattern, words in self._compiled if pattern.search(question))

    @classmethod
    def load(cls, given: str | os.PathLike[str] | Mapping[str, str] | Glossary | None) -> Glossary:
        """A user's glossary: a mapping (pattern -> words added), or a JSON file of one; None: empty."""
        if given is None:
            return cls()
        if isinstance(given, Glossary):
            return given
        if isinstance(given, Mapping):
            return cls(tuple((str(k), str(v)) for k, v in given.items()))
        path = Path(given).expanduser()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"Cannot read the glossary {path}: {exc}. It is a JSON object of pattern -> words added, e.g. "
                '{"working capital": "total current assets total current liabilities"}.'
            ) from exc
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ConfigError(f"The glossary {path} must be a JSON object of pattern -> words added (strings).")
        return cls(tuple(data.items()))


FILINGS_GLOSSARY = Glossary(GLOSSARY)


@dataclass(frozen=True)
class Knowledge:
    """What the documents a question can reach add to the core: their ``languages`` (a question is made terms in
    each), the ``glossary`` that applies, and whether finance words ask for a figure (``filings``)."""

    languages: tuple[str, ...] = (DEFAULT_LANGUAGE,)
    glossary: Glossary = field(default_factory=Glossary)
    filings: bool = False

    def expand(self, question: str) -> str:
        return self.glossary.expand(question)

    def asks_for_quantity(self, question: str) -> bool:
        """Whether ``question`` asks for an amount, a rate or a count (its answer is likely a figure)."""
        return QUANTITY.search(question) is not None or (self.filings and FINANCE_QUANTITY.search(question) is not None)


GENERAL = Knowledge()
"""The core alone: English, no glossary."""


def languages(profiles: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The languages of documents of these ``profiles`` (a question is made terms in each)."""
    return tuple(dict.fromkeys(str(p.get("language") or DEFAULT_LANGUAGE) for p in profiles)) or (DEFAULT_LANGUAGE,)


def knowledge_of(profiles: Iterable[Mapping[str, Any]], glossary: Glossary | None = None) -> Knowledge:
    """What documents of these ``profiles`` (``describe``'s fields) add up to, with a user's ``glossary``: the
    filings profile applies where filings are at least half of them (a question routed to a company's filings, a
    library of filings), not to a library with a few filings among papers."""
    seen = list(profiles)
    filings = bool(seen) and 2 * sum(p.get("kind") == FILINGS for p in seen) >= len(seen)
    added = glossary or Glossary()
    return Knowledge(languages(seen), FILINGS_GLOSSARY + added if filings else added, filings)
