"""How a library question is ranked, top to bottom (``search_library``):

1. route: the documents the question names (a title or a company on their covers; for filings, period and
   form: ``search.routing``), doubted where the chunks closest in meaning lie elsewhere (``_route_doubted``);
2. words: BM25 over every document in reach (``index.SqliteIndex.search``: the terms in the documents'
   languages, the figure prior, the names' surplus, one chunk a page first), the routed documents lifted and
   the others at ``OUTSIDE_ROUTE`` of their score (``_by_words``);
3. meaning: with an embedder whose vectors the index holds, the words' candidates and the chunks closest in
   meaning fused (``meaning.fuse``), one chunk a page first again;
4. repeats: a chunk that repeats a better one (a copy, the same note next year) after the others
   (``ranking.spread_repeats``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from minions.backends.embeddings import Embedder

from .index import ChunkIndex
from .meaning import MEANING_DEPTH, MEANING_WEIGHT, by_sentence, fuse
from .profiles import Glossary, Knowledge, knowledge_of, languages
from .ranking import Ranked, Ranking, spread_pages, spread_repeats
from .routing import COVER_CHARS, Route, name_pairs, question_dates, route
from .words import tokenize

__all__ = ["OTHER_DOCUMENT", "OUTSIDE_ROUTE", "RANK_DEPTH", "LibrarySearch", "search_library"]

RANK_DEPTH = 50
"""Chunks a search returns, best first: what the protocols read from (they read ``read_chunks`` of them)."""
OTHER_DOCUMENT = 0.5
"""A chunk of a routed document after the first scores this share of its words' score: the first document is
the one the question names best (library recall @10 0.636 against 0.589 with all routed documents alike)."""
OUTSIDE_ROUTE = 0.25
"""A chunk of a document the question was not routed to scores this share of its words' score: the route lifts
its documents, and the others still reach the ranking (docs/library.md, "A route is evidence, not a wall")."""
ROUTE_CHECK = 10
ROUTE_AGREEMENT = 0.2
"""With meaning vectors, a route is kept when at least this share of the ``ROUTE_CHECK`` chunks closest in meaning
lie in the routed documents; else words search every document (chosen on BAMBOO PaperQA: docs/library.md)."""


@dataclass(frozen=True)
class LibrarySearch:
    """A question's search of a library: the route, then the chunks ranked within the routed documents."""

    route: Route
    ranking: Ranking
    seconds: float

    def documents(self, depth: int) -> list[str]:
        """The documents to hand a protocol: the routed ones, then any other that one of the best ``depth``
        chunks comes from."""
        names = list(self.route.documents) if self.route.routed else []
        return list(dict.fromkeys(names + [r.chunk.document for r in self.ranking.ranked[:depth]]))


def search_library(
    index: ChunkIndex,
    question: str,
    *,
    documents: Sequence[str] | None = None,
    k: int = RANK_DEPTH,
    embedder: Embedder | None = None,
    weight: float = MEANING_WEIGHT,
    asked: Any = None,
    glossary: Glossary | None = None,
    outside: float = OUTSIDE_ROUTE,
    sentences: bool = True,
) -> LibrarySearch:
    """Route ``question`` among ``documents`` (names; None: the whole library), then rank chunks by words over all
    of ``documents``, the routed documents' lifted (the first at its words' score, the other routed ones at
    ``OTHER_DOCUMENT`` of theirs, the rest at ``outside``) and, with an ``embedder`` whose vectors the index holds,
    by meaning too (``meaning.fuse``, ``weight`` on meaning); a chunk that repeats a better one comes after the
    others (``ranking.spread_repeats``). What the documents' profiles add (``profiles.knowledge_of``: their
    languages, the filings' glossary where the question reaches filings) applies, with a user's ``glossary``.
    ``asked``: the question's vector, where the caller has it; ``sentences``: the best few re-ranked by their best
    sentence (``meaning.by_sentence``)."""
    started = time.perf_counter()
    every = index.documents()
    records = [d for d in every if documents is None or d.name in documents]
    profiles = {d.name: d.profile for d in records}
    spoken = languages(profiles.values())
    frequency = index.document_frequency(tokenize(question, spoken))
    if pairs := index.phrase_documents(name_pairs(question, profiles)):
        frequency |= {pair: len(docs) for pair, docs in pairs.items()}
        pairs = index.phrase_documents(list(pairs), before=COVER_CHARS)
    dates = index.phrase_documents(question_dates(question), before=COVER_CHARS)
    only_in = index.phrase_documents([t for t, n in frequency.items() if n == 1 and " " not in t])
    found = route(question, profiles, frequency, pairs=pairs, dates=dates, only_in=only_in, library=len(every))
    routed = time.perf_counter()
    everywhere = [d.name for d in records] if documents is not None else None
    about: dict[str, Any] = {"meaning": "off"}
    near: list[Ranked] = []
    vector = None
    if embedder is not None:
        vector = asked if asked is not None else embedder.embed([question], query=True)[0]
        near = index.meaning_search(vector, documents=documents, k=MEANING_DEPTH)
        if found.routed and near and _route_doubted(found, near):
            about["route_doubted"] = found.documents
            found = Route([d.name for d in records], {}, found.considered, False)
    reached = [profiles[n] for n in found.documents if n in profiles] if found.routed else list(profiles.values())
    known = replace(knowledge_of(reached, glossary), languages=spoken)
    depth = max(k, MEANING_DEPTH) if near else k
    words = _by_words(index, question, found, everywhere, depth, known, outside)
    if embedder is not None:
        words = words[:MEANING_DEPTH]
        closeness = index.similarities(vector, [(r.chunk.document, r.chunk.index) for r in words]) if near else []
        ranked = spread_pages(fuse(words, closeness, near, weight=weight)) if near else words
        ranked = spread_pages(by_sentence(ranked, vector, embedder)) if near and sentences else ranked
        about["meaning"] = embedder.name if near else f"{embedder.name}: no vectors yet, words alone"
    else:
        ranked = words
    ranked = spread_repeats(ranked[:k])
    total = index.chunk_count(documents)
    seconds = time.perf_counter() - started
    about |= {**found.to_dict(), "search_s": round(seconds, 4), "route_s": round(routed - started, 4),
              "rank_s": round(started + seconds - routed, 4)}  # fmt: skip
    return LibrarySearch(found, Ranking(ranked, total, about, embedder if near else None), seconds)


def _route_doubted(found: Route, near: Sequence[Ranked]) -> bool:
    """Whether meaning doubts the route: fewer than ``ROUTE_AGREEMENT`` of the ``ROUTE_CHECK`` chunks closest in
    meaning (over the whole library) lie in the routed documents. A question's words found on a cover may name no
    document (a paper's question shares words with other papers' titles), and routing by them would lift chunks
    of the wrong document."""
    closest = near[:ROUTE_CHECK]
    inside = sum(r.chunk.document in found.documents for r in closest)
    return inside < ROUTE_AGREEMENT * len(closest)


def _by_words(
    index: ChunkIndex,
    question: str,
    found: Route,
    scope: Sequence[str] | None,
    k: int,
    knowledge: Knowledge,
    outside: float,
) -> list[Ranked]:
    """The ``k`` best chunks of ``scope`` (None: every document) by words, a route's documents lifted
    (``search_library``)."""
    if not found.routed:
        return index.search(question, documents=scope, k=k, names=found.names, knowledge=knowledge)
    # one search over the routed documents (each search reads the terms' postings of the whole library),
    # deep enough that the first document's chunks are all there after the others' are weighed down
    first = found.documents[0]
    ranked = [
        r if r.chunk.document == first else replace(r, score=r.score * OTHER_DOCUMENT)
        for r in index.search(
            question, documents=found.documents, k=k * len(found.documents), names=found.names, knowledge=knowledge
        )
    ]
    routed = set(found.documents)
    ranked += [
        replace(r, score=r.score * outside)
        for r in index.search(question, documents=scope, k=k, knowledge=knowledge)
        if r.chunk.document not in routed
    ]
    ranked.sort(key=lambda r: -r.score)  # stable: ties keep the index's order, the routed documents' first
    return spread_pages(ranked)[:k]  # the sort by score undid the index's spread
