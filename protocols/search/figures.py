"""Figures in text: the one parser behind the ranking's figure prior, the answers a job may give and the check of a
written answer.

A figure is a number as a report writes it, with what says its size: "$31.8 million", "(1,577)", "12%", "21.6 %",
"€4.2bn", "-5", "29 per cent". Its number is read with thousands separators ("1,577") and a decimal part; a
scale after it ("%", "million", "bn", "k", ...) gives its power of ten. It does not start inside a word or after a
decimal point ("Q3", "FY2018", "v1.2" hold none), and a number run into a word is no figure ("3rd", "10x").

    figures(text)        every figure of a passage, with its number and scale (quotes, written answers)
    is_figure(token)     whether a whitespace-separated token is one figure, a sentence's end aside ("2018.")
    figure_share(text)   the share of a passage's tokens that are figures (the ranking's prior, table rows)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

__all__ = ["Figure", "figure_share", "figures", "is_figure"]

_FIGURE = re.compile(
    r"(?<![\w.])[$€£]?\(?[-+]?(?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\)?"
    r"(?:\s?(?P<scale>%|(?:percent|per cent|thousand|million|billion|trillion|bn|mn|m|k)\b)|(?!\w))",
    re.IGNORECASE,
)
_POWER = {"thousand": 3, "k": 3, "million": 6, "mn": 6, "m": 6, "billion": 9, "bn": 9, "trillion": 12}
_SENTENCE_END = ".,;:"
"""What may follow a figure at the end of a token ("2018.", "1,577,") and still leave the token a figure."""


@dataclass(frozen=True)
class Figure:
    """A figure of a text: ``text`` as written (stripped), at ``start``, its ``number`` (sign and separators
    dropped) and its ``power`` of ten (6 for "million", 0 without a scale or for "%")."""

    text: str
    start: int
    number: Decimal
    power: int

    @property
    def value(self) -> Decimal:
        """The number at its scale ("$31.8 million": 31800000)."""
        return self.number.scaleb(self.power).normalize()


def figures(text: str) -> list[Figure]:
    """The figures of ``text``, in order."""
    return [
        Figure(
            m.group(0).strip(),
            m.start(),
            Decimal(m.group("number").replace(",", "")),
            _POWER.get((m.group("scale") or "").lower(), 0),
        )
        for m in _FIGURE.finditer(text)
    ]


def is_figure(token: str) -> bool:
    """Whether ``token`` (no whitespace in it) is one figure, with a sentence's punctuation after it or not."""
    return _FIGURE.fullmatch(token.rstrip(_SENTENCE_END) or token) is not None


def figure_share(text: str) -> float:
    """The share of ``text``'s whitespace-separated tokens that are figures (1,577  (305)  $31.8  12%)."""
    tokens = text.split()
    return sum(is_figure(t) for t in tokens) / len(tokens) if tokens else 0.0
