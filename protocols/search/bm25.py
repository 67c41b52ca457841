"""BM25 ranking of passages in memory: the one implementation behind every ranking of chunks outside the
library's index (the local reader, the RAG baseline, the Minions scopes), over the terms the index uses
(``search.words.tokenize``, in the passages' languages).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from .words import DEFAULT_LANGUAGE, tokenize

__all__ = ["BM25"]


class BM25:
    """Okapi BM25 over ``texts`` (their words made terms in ``languages``: ``search.words.tokenize``).
    ``top(query, k)`` returns the indices of the ``k`` best, best first."""

    def __init__(
        self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75, languages: Sequence[str] = (DEFAULT_LANGUAGE,)
    ) -> None:
        self.k1, self.b, self.languages = k1, b, tuple(languages)
        self.docs = [Counter(tokenize(t, self.languages)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg_length = (sum(self.lengths) / len(self.docs)) if self.docs else 0.0
        df = Counter(term for d in self.docs for term in d)
        n = len(self.docs)
        # idf with +1 inside the log so that a term in every document still scores a little, never negative
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def score(self, query: str, i: int) -> float:
        return self._score(tokenize(query, self.languages), i)

    def scores(self, query: str) -> list[float]:
        """Every passage's score for ``query`` (its terms made once)."""
        terms = tokenize(query, self.languages)
        return [self._score(terms, i) for i in range(len(self.docs))]

    def _score(self, terms: Sequence[str], i: int) -> float:
        doc, length = self.docs[i], self.lengths[i]
        norm = self.k1 * (1 - self.b + self.b * length / (self.avg_length or 1))
        return sum(self.idf[t] * doc[t] * (self.k1 + 1) / (doc[t] + norm) for t in terms if t in doc)

    def top(self, query: str, k: int) -> list[int]:
        scores = self.scores(query)
        # ties keep document order, so an uninformative query takes the first chunks
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
