"""A meaning signal beside words: chunks found by what they say, not only by the words they share with a question.

Words find a figure whose line the question names ("capital expenditure"); they miss a fact said in other words
("what it owes lenders after five years" for "long-term debt maturities thereafter"). A sentence-embedding model
(``backends.embeddings``) maps both to nearby vectors. The library keeps a vector for each chunk in its own index
file (``search.vectors``), computed when documents are added (``embed_missing``: in batches, with progress, and
resumable: what has a vector is not embedded again), and a question's search fuses the two rankings:

    words    the chunks BM25 ranks best (with the glossary and the figure prior: ``SqliteIndex.search``)
    meaning  the chunks whose vectors are closest to the question's (``SqliteIndex.meaning_search``)
    fused    reciprocal rank fusion, ``1 / (RRF_K + rank by words) + MEANING_WEIGHT / (RRF_K + rank by meaning)``

Each chunk is embedded with a short header of where it stands (``chunk_header``: its document's name, form and
year, and its section), so "Boeing's 2022 auditor" meets the auditor's report of that filing. A document whose
vectors are not computed yet is searched by words alone, and the search says so (``about["meaning"]``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minions.backends.embeddings import Embedder

from .ranking import RRF_K, Ranked

if TYPE_CHECKING:
    from .index import ChunkIndex

__all__ = [
    "EMBED_BATCH",
    "MEANING_DEPTH",
    "MEANING_WEIGHT",
    "EmbedProgress",
    "chunk_header",
    "embed_missing",
    "fuse",
    "meaning_order",
    "meaning_scores",
]

log = logging.getLogger(__name__)

MEANING_WEIGHT = 0.5
"""The meaning term's weight in the fusion, the words' counting 1 (chosen on FinanceBench: docs/library.md)."""
MEANING_DEPTH = 100
"""Chunks by meaning that the fusion considers (those further down add little to a rank-fused score)."""
EMBED_BATCH = 64
"""Chunks embedded and stored at a time: a stopped run loses at most one batch's work."""
HEADER_CHARS = 120
"""The longest header a chunk is embedded with."""


@dataclass(frozen=True)
class EmbedProgress:
    """How far computing the vectors has come: chunks done of ``total``, seconds so far, and the time left."""

    done: int
    total: int
    seconds: float

    @property
    def eta_s(self) -> float | None:
        return self.seconds / self.done * (self.total - self.done) if self.done else None


def chunk_header(document: str, profile: Mapping[str, Any] | None, section: str | None) -> str:
    """Where a chunk stands, in a line: its document's name (without the suffix), form and year when the cover
    says them, and the chunk's section title."""
    parts = [Path(document).stem.replace("_", " ")]
    profile = profile or {}
    parts += [str(profile[key]) for key in ("form", "year") if profile.get(key)]
    if section:
        parts.append(section)
    return " | ".join(parts)[:HEADER_CHARS]


def embed_missing(
    index: ChunkIndex,
    embedder: Embedder,
    *,
    batch: int = EMBED_BATCH,
    on_progress: Callable[[EmbedProgress], None] | None = None,
) -> int:
    """Compute and store a vector for every chunk of ``index`` that has none (vectors of another model are
    dropped first), ``batch`` chunks at a time; the number embedded."""
    index.use_vector_model(embedder.name)
    profiles = {d.name: d.profile for d in index.documents()}
    total = sum(index.chunk_count([d]) - n for d, n in index.vector_counts().items())
    started, done = time.perf_counter(), 0
    while rows := index.unembedded(batch):
        texts = [f"{chunk_header(doc, profiles.get(doc), section)}\n{text}" for _, doc, text, section in rows]
        index.add_vectors([r[0] for r in rows], embedder.embed(texts))
        done += len(rows)
        if on_progress is not None:
            on_progress(EmbedProgress(done, max(total, done), time.perf_counter() - started))
    if done:
        log.info("embedded %d chunks with %s in %.1f s", done, embedder.name, time.perf_counter() - started)
    return done


def fuse(words: Sequence[Ranked], meaning: Sequence[Ranked], *, weight: float = MEANING_WEIGHT) -> list[Ranked]:
    """``words`` and ``meaning`` (each best first) as one ranking by reciprocal rank fusion, ``weight`` on
    meaning's term; a chunk in one list only gets that list's term. Each is scored by its fused score; ties keep
    words' order, then meaning's."""
    fused: dict[tuple[str, int], float] = {}
    first: dict[tuple[str, int], Ranked] = {}
    for ranking, w in ((words, 1.0), (meaning, weight)):
        for rank, r in enumerate(ranking):
            fused[_key(r)] = fused.get(_key(r), 0.0) + w / (RRF_K + rank + 1)
            first.setdefault(_key(r), r)
    order = sorted(fused, key=lambda k: -fused[k])  # stable: words' order, then meaning's, among ties
    return [replace(first[k], score=fused[k]) for k in order]


def _key(r: Ranked) -> tuple[str, int]:
    return (r.chunk.document, r.chunk.index)


def meaning_scores(embedder: Embedder, question: str, texts: Sequence[str]) -> list[float]:
    """The cosine similarity of each of ``texts`` to ``question``'s meaning, in their order (no index needed)."""
    if not texts:
        return []
    asked = embedder.embed([question], query=True)[0]
    return [float(x) for x in embedder.embed(list(texts)) @ asked]


def meaning_order(ranked: Sequence[Ranked], scores: Sequence[float]) -> list[Ranked]:
    """``ranked`` by meaning alone (``scores``, one per item), closest first; ties keep their order."""
    return [ranked[i] for i in sorted(range(len(ranked)), key=lambda i: (-scores[i], i))]
