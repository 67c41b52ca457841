"""BM25 ranking of chunks: the one implementation behind every ranking of chunks (the local reader, the RAG
baseline, the Minions scopes).

Terms are lower-cased words and numbers, stop words dropped, plurals made singular ("expenditures",
"expenditure"). ``asks_for_quantity`` and ``figures.figure_share`` give the prior the ranker adds for questions that
ask for a quantity: on FinanceBench such answers sit in tables, and passages dense in figures rank better (measured
in ``minions bench evidence``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["BM25", "asks_for_quantity", "term_set", "tokenize"]

_STOP = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "what",
        "which",
        "who",
        "with",
    }
)


_WORD = re.compile(r"[a-z0-9]+")
_QUANTITY = re.compile(
    r"\b(?:how (?:much|many)|amount|total|ratio|margin|percent(?:age)?|usd|dollars?|millions?|billions?|"
    r"revenues?|income|expenses?|costs?|capex|expenditures?|cash|debt|assets|liabilities|eps|earnings|growth|"
    r"rates?|change|increase|decrease|sales|profits?|dividends?|shares|number|price|average)\b|[%$€£]",
    re.IGNORECASE,
)


def _stem(word: str) -> str:
    """Harman's S-stemmer (1991): plurals to singular, nothing else ("expenditures" and "expenditure",
    "companies" and "company" meet; "business" stays). On FinanceBench it ranked better than no stemming and than
    stripping more suffixes (``minions bench evidence --lexical-only``)."""
    if len(word) <= 3 or word[0].isdigit():
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    return [_stem(t) for t in _WORD.findall(text.lower()) if t not in _STOP]


def term_set(text: str) -> set[str]:
    """``set(tokenize(text))``, each distinct word made singular once."""
    return {_stem(t) for t in set(_WORD.findall(text.lower())) if t not in _STOP}


def asks_for_quantity(question: str) -> bool:
    """Whether ``question`` asks for an amount, a rate or a count (its answer is likely a figure)."""
    return _QUANTITY.search(question) is not None


class BM25:
    """Okapi BM25 over ``texts``. ``top(query, k)`` returns the indices of the ``k`` best, best first."""

    def __init__(self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(tokenize(t)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg_length = (sum(self.lengths) / len(self.docs)) if self.docs else 0.0
        df = Counter(term for d in self.docs for term in d)
        n = len(self.docs)
        # idf with +1 inside the log so that a term in every document still scores a little, never negative
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def score(self, query: str, i: int) -> float:
        doc, length = self.docs[i], self.lengths[i]
        norm = self.k1 * (1 - self.b + self.b * length / (self.avg_length or 1))
        return sum(self.idf[t] * doc[t] * (self.k1 + 1) / (doc[t] + norm) for t in tokenize(query) if t in doc)

    def top(self, query: str, k: int) -> list[int]:
        scores = [self.score(query, i) for i in range(len(self.docs))]
        # ties keep document order, so an uninformative query takes the first chunks
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
