"""Which chunks the local model reads, best first.

    1. lexical: BM25 over the query (the question, and a plan's instruction and keywords, with what the documents'
       profile adds: for filings, the lines and statements behind the measures it names, ``search.profiles``),
       times a prior for passages dense in figures when the question asks for a quantity (``FIGURE_WEIGHT``);
    2. ``spread_pages``: one chunk of each page first, so the chunks read show as many pages as they can; in a
       library, ``spread_repeats`` then puts after the others a chunk that repeats a better one (the same note
       in the next year's filing);
    3. ``fused_order``: items in that order re-ordered by reciprocal rank fusion with the local model's scores
       (how ``protocols.evidence.jobs`` picks a chunk's sentence: neither scale dominates).

A small model reads only what ranks best: the rest is skipped, and the ranking says how many chunks there were.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from minions.chunking import Chunk

from .bm25 import BM25
from .figures import figure_share
from .profiles import GENERAL, Knowledge
from .words import term_set

__all__ = [
    "FIGURE_WEIGHT",
    "REPEAT_SHARE",
    "Ranked",
    "Ranking",
    "fused_order",
    "lexical_rank",
    "page_spread",
    "search_terms",
    "spread_pages",
    "spread_repeats",
    "word_order",
]

FIGURE_WEIGHT = 4.0
"""A chunk whose tokens are all figures (capped at half) scores up to 1 + FIGURE_WEIGHT / 2 times its BM25 score."""
FIGURE_CAP = 0.5
REPEAT_SHARE = 0.6
"""A chunk repeats a better one when this share of the words either holds are in both (``spread_repeats``; chosen
on FinanceBench's 129 questions: docs/library.md, "A passage said again")."""
RRF_K = 10
"""Reciprocal rank fusion's constant: small, so the top ranks of either list count most."""


@dataclass(frozen=True)
class Ranked:
    """A chunk with its place in the ranking and the scores that put it there."""

    chunk: Chunk
    score: float
    model: float | None = None
    """The local model's log-odds that the chunk answers the question; None when it did not read it."""


@dataclass(frozen=True)
class Ranking:
    """Chunks ranked ahead of a run (a library's search): the best ``ranked``, of ``chunks`` searched."""

    ranked: Sequence[Ranked]
    chunks: int
    """Chunks the search ranked them among (every chunk of the documents searched)."""
    about: Mapping[str, Any] = field(default_factory=dict)
    """How the search went, for ``RunResult.reading["library"]``: the documents considered and why, its time."""
    embedder: Any = field(default=None, compare=False, repr=False)
    """The embedding model that ranked by meaning (None: words alone): the run weighs the sentences it reads with
    the same one (``evidence.reading``)."""


def word_order(
    texts: Sequence[str], query: str, *, question: str | None = None, knowledge: Knowledge = GENERAL
) -> list[tuple[int, float]]:
    """``texts`` ranked by BM25 over ``query`` (terms in ``knowledge``'s languages), times the figure prior when
    ``question`` (default: the query) asks for a quantity: (index, score), best first; ties keep their order."""
    if not texts:
        return []
    bm25 = BM25(texts, languages=knowledge.languages)
    quantity = knowledge.asks_for_quantity(question if question is not None else query)
    scores = []
    for text, s in zip(texts, bm25.scores(query), strict=True):
        if quantity:
            s *= 1 + FIGURE_WEIGHT * min(figure_share(text), FIGURE_CAP)
        scores.append(s)
    return sorted(((i, s) for i, s in enumerate(scores)), key=lambda item: (-item[1], item[0]))


def search_terms(query: str, question: str | None = None, knowledge: Knowledge = GENERAL) -> str:
    """What chunks are ranked by: ``query``, then the words that ``knowledge``'s glossary adds for what it or
    ``question`` names (the filings profile's: the lines and statements behind a measure, ``search.glossary``)."""
    asked = query if question is None or question == query else f"{query}\n{question}"
    added = knowledge.expand(asked)
    return f"{query}\n{added}" if added else query


def spread_pages(ranked: Sequence[Ranked]) -> list[Ranked]:
    """``ranked`` with the best chunk of each page first, then the others, each part in its order. A page's
    second chunk then follows the other pages' best: the chunks read show more pages (FinanceBench page recall
    @10 0.801 -> 0.833, ``minions bench evidence --lexical-only``). Chunks without pages keep their places."""
    pages = [(r.chunk.document, r.chunk.pages[0]) if r.chunk.pages else None for r in ranked]
    return [ranked[i] for i in page_spread(pages)]


def spread_repeats(ranked: Sequence[Ranked], share: float = REPEAT_SHARE) -> list[Ranked]:
    """``ranked`` with each chunk that repeats a better one (its words and the better one's, as sets, the same
    for at least ``share`` of both together: the same note in the next year's filing, a paragraph a document
    says twice, the same chunk of a copy of the same file) after the others, each part in its order: the chunks
    read say more things."""
    said: list[set[str]] = []  # a kept chunk's words
    first: list[Ranked] = []
    later: list[Ranked] = []
    for r in ranked:
        words = term_set(r.chunk.text)
        if any(_repeats(words, other, share) for other in said):
            later.append(r)
            continue
        said.append(words)
        first.append(r)
    return first + later


def _repeats(words: set[str], other: set[str], share: float) -> bool:
    """Whether ``words`` and ``other`` have ``share`` of their union in common (the sizes first: a set less than
    ``share`` the size of the other cannot)."""
    small, large = sorted((len(words), len(other)))
    if small < share * large:
        return False
    common = len(words & other)
    return common >= share * (small + large - common)


def page_spread(pages: Sequence[Hashable | None]) -> list[int]:
    """``spread_pages``'s order of items with these pages (None: an item without pages): indices."""
    first: list[int] = []
    later: list[int] = []
    seen: set[Hashable] = set()
    for i, page in enumerate(pages):
        if page is not None and page in seen:
            later.append(i)
            continue
        if page is not None:
            seen.add(page)
        first.append(i)
    return first + later


def lexical_rank(
    chunks: Sequence[Chunk], query: str, *, question: str | None = None, knowledge: Knowledge = GENERAL
) -> list[Ranked]:
    """Every chunk, ranked by ``word_order`` over ``search_terms``, pages spread (``spread_pages``); ``knowledge``:
    what the chunks' documents add to the core (``profiles.knowledge_of``)."""
    terms = search_terms(query, question, knowledge)
    order = word_order([c.text for c in chunks], terms, question=question or query, knowledge=knowledge)
    return spread_pages([Ranked(chunks[i], s) for i, s in order])


def fused_order(model_scores: Sequence[float], *, weight: float = 1.0) -> list[tuple[int, float]]:
    """Items already in lexical rank order (0 best), re-ordered by reciprocal rank fusion of that rank and their
    rank by ``model_scores`` (``weight`` on the model's term): (index, fused score), best first."""
    by_model = sorted(range(len(model_scores)), key=lambda i: (-model_scores[i], i))
    model_rank = {i: r for r, i in enumerate(by_model)}
    fused = {i: 1 / (RRF_K + i + 1) + weight / (RRF_K + model_rank[i] + 1) for i in range(len(model_scores))}
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))
