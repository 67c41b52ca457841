"""A meaning signal beside words: chunks found by what they say, not only by the words they share with a question.

Words find a figure whose line the question names ("capital expenditure"); they miss a fact said in other words
("what it owes lenders after five years" for "long-term debt maturities thereafter"). A sentence-embedding model
(``backends.embeddings``) maps both to nearby vectors. The library keeps a vector for each chunk in its own index
file (``search.vectors``), computed when documents are added (``embed_missing``: in batches, with progress, and
resumable: what has a vector is not embedded again), and a question's search mixes the two:

    words    the chunks BM25 ranks best in the documents the question is routed to (with the glossary and the
             figure prior: ``SqliteIndex.search``)
    meaning  the chunks whose vectors are closest to the question's, in the whole library (routing is by words:
             a question that names no company or period still finds its passage by meaning)
    fused    each chunk's words score and cosine scaled to 0..1 over both lists, then
             ``(1 - MEANING_WEIGHT) * words + MEANING_WEIGHT * meaning`` (``fuse``)

Each chunk is embedded with a short header of where it stands (``chunk_header``: its document's name, form and
year, and its section), so "Boeing's 2022 auditor" meets the auditor's report of that filing. A document whose
vectors are not computed yet is searched by words alone, and the search says so (``about["meaning"]``).

Documents asked about without a library (``minions ask FILE``, the SDK over loaded documents) are ranked the same
way (``rank_loaded``): their chunks by words, fused with their chunks by meaning, each chunk's vector computed once
and kept in a cache file by the hash of what was embedded (``VectorCache``), so a second question costs one
embedding, the question's.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from minions.backends.address import on_this_device
from minions.backends.embeddings import Embedder, embeddings_sent, vector_model_of
from minions.chunking import Chunk
from minions.paths import cache_dir
from minions.sqlite import write_transaction

from .ranking import Ranked, spread_pages
from .sent import sent_by_document
from .sentences import spans

if TYPE_CHECKING:
    from .index import ChunkIndex

__all__ = [
    "EMBED_BATCH",
    "MEANING_DEPTH",
    "MEANING_WEIGHT",
    "SENTENCE_DEPTH",
    "SENTENCE_WEIGHT",
    "EmbedProgress",
    "SentenceMeaning",
    "VectorCache",
    "by_sentence",
    "chunk_header",
    "embed_missing",
    "fuse",
    "meaning_order",
    "meaning_scores",
    "rank_loaded",
    "scaled",
    "sentence_meaning",
    "text_digest",
    "user_cache",
    "user_cache_path",
    "weighed_sentences",
]

log = logging.getLogger(__name__)

MEANING_WEIGHT = 0.4
"""Meaning's share of the mix, words' the rest (chosen on FinanceBench's 129 questions, reported on the other sets:
docs/library.md, "Meaning's weight, again")."""
MEANING_DEPTH = 300
"""Chunks by words, and chunks by meaning, that the mix ranks together."""
EMBED_BATCH = 256
"""Chunks embedded and stored at a time: a stopped run loses at most one batch's work (15 s here); the embedder
batches them by length, so more at a time pads less."""
HEADER_CHARS = 120
"""The longest header a chunk is embedded with."""
SENTENCE_DEPTH = 20
"""The best chunks re-ranked by their best sentence (``by_sentence``): the ones that may reach the ten read."""
SENTENCE_WEIGHT = 0.3
"""The best sentence's closeness in that re-ranking, beside the chunk's fused score (both scaled to 0..1; chosen
on FinanceBench's half A and BAMBOO: docs/library.md, "A fact said in one sentence")."""
MIN_SENTENCE_CHARS = 20
"""A shorter span (a heading, a figure alone) says too little to be weighed by itself."""
QUOTE_MEANING_WEIGHT = 0.7
"""Meaning's share where a chunk's sentences, or the quotes read, are ordered for a question (``SentenceMeaning``):
words' the rest."""


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
    index.use_vector_model(vector_model_of(embedder))
    profiles = {d.name: d.profile for d in index.documents()}
    total = sum(index.chunk_count([d]) - n for d, n in index.vector_counts().items())
    started, done, after = time.perf_counter(), 0, 0
    while rows := index.unembedded(batch, after):
        texts = [f"{chunk_header(doc, profiles.get(doc), section)}\n{text}" for _, doc, text, section in rows]
        with embeddings_sent() as sent:  # what left the device (an embedder on another machine): the library's log
            vectors = embedder.embed(texts)
        index.add_vectors([r[0] for r in rows], vectors)
        if sent:
            index.record_sent(sent_by_document(sent, [r[1] for r in rows]))
        done, after = done + len(rows), rows[-1][0]
        if on_progress is not None:
            on_progress(EmbedProgress(done, max(total, done), time.perf_counter() - started))
    if done:
        log.info("embedded %d chunks with %s in %.1f s", done, embedder.name, time.perf_counter() - started)
    return done


def fuse(
    words: Sequence[Ranked],
    closeness: Sequence[float | None],
    meaning: Sequence[Ranked],
    *,
    weight: float = MEANING_WEIGHT,
) -> list[Ranked]:
    """``words`` (best first, by words' score; ``closeness``: each one's cosine to the question, None where it has
    no vector) and ``meaning`` (the chunks closest to the question, scored by their cosine) as one ranking: each
    chunk's words score and cosine are scaled to 0..1 over all of them (min-max; a chunk found by meaning alone
    has the lowest words score, one without a vector the lowest cosine), then mixed, ``weight`` on meaning.
    Scores are the mix; ties keep words' order, then meaning's."""
    cosine = {_key(r): c for r, c in zip(words, closeness, strict=True) if c is not None}
    cosine |= {_key(r): r.score for r in meaning}
    first: dict[tuple[str, int], Ranked] = {}
    for r in (*words, *meaning):
        first.setdefault(_key(r), r)
    if not first:
        return []
    said = {_key(r): r.score for r in words}
    keys = list(first)
    lowest_words = min(said.values(), default=0.0)
    lowest_cos = min(cosine.values(), default=0.0)
    by_words = scaled([said.get(k, lowest_words) for k in keys])
    by_meaning = scaled([cosine.get(k, lowest_cos) for k in keys])
    mixed = {k: (1 - weight) * w + weight * m for k, w, m in zip(keys, by_words, by_meaning, strict=True)}
    return [replace(first[k], score=mixed[k]) for k in sorted(keys, key=lambda k: -mixed[k])]


def by_sentence(
    ranked: Sequence[Ranked],
    asked: Any,
    embedder: Embedder,
    cache: VectorCache | None = None,
    *,
    depth: int = SENTENCE_DEPTH,
    weight: float = SENTENCE_WEIGHT,
) -> list[Ranked]:
    """``ranked``'s best ``depth`` re-ranked by their best sentence: a chunk is 1,200 characters and one vector,
    and a fact said in prose is one sentence of it, which the chunk's vector blurs. Each of those chunks' sentences
    (``sentences.spans``, ``MIN_SENTENCE_CHARS`` or longer) is embedded through ``cache`` (the user's cache file: a
    sentence is embedded once), and a chunk scores its score plus ``weight`` times its closest sentence's cosine to
    ``asked`` (the question's vector), both scaled to 0..1 over the ``depth``; the rest follow as they were. Only
    with an embedder on this device (``sentence_meaning``)."""
    meaning = sentence_meaning(embedder, asked, cache)
    if meaning is None:
        return list(ranked)
    head = list(ranked[:depth])
    texts, owners = [], []
    for i, r in enumerate(head):
        weighed = weighed_sentences(r.chunk.text)
        texts += weighed
        owners += [i] * len(weighed)
    if not texts:
        return list(ranked)
    cosine = meaning.closeness(texts)
    best = np.full(len(head), -np.inf)
    np.maximum.at(best, np.asarray(owners), cosine)
    best[np.isinf(best)] = float(best[~np.isinf(best)].min())  # a chunk with no sentence of its own: the lowest
    mix = [a + weight * b for a, b in zip(scaled([r.score for r in head]), scaled(best.tolist()), strict=True)]
    order = sorted(range(len(head)), key=lambda i: (-mix[i], i))
    return [replace(head[i], score=mix[i]) for i in order] + list(ranked[depth:])


def weighed_sentences(text: str) -> list[str]:
    """The sentences of a chunk's ``text`` that ``by_sentence`` weighs (``sentences.spans``, ``MIN_SENTENCE_CHARS``
    or longer), in their order."""
    return [span.text for span in spans(text) if len(span.text) >= MIN_SENTENCE_CHARS]


@dataclass(frozen=True)
class SentenceMeaning:
    """How close sentences are to a question in meaning: the question's vector (``asked``) and the model that made
    it, each sentence embedded once through ``cache`` (the user's cache file by default; ``by_sentence`` keeps the
    best chunks' sentences there, so the sentences a run reads are mostly embedded already)."""

    embedder: Embedder
    asked: Any
    cache: VectorCache | None = None

    def closeness(self, texts: Sequence[str]) -> np.ndarray:
        """Each of ``texts``' cosine to the question."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        vectors = (self.cache or user_cache()).vectors(self.embedder, texts)
        return vectors @ np.asarray(self.asked, dtype=np.float32).reshape(-1)

    def order(
        self, texts: Sequence[str], by_words: Sequence[tuple[int, float]], *, weight: float = QUOTE_MEANING_WEIGHT
    ) -> list[tuple[int, float]]:
        """``by_words`` ((index into ``texts``, words' score), best first: ``ranking.word_order``) re-ordered with
        each text's closeness: both scaled to 0..1 over them, ``weight`` on meaning; an empty text is the farthest.
        (index, mixed score), best first; ties keep words' order. A sentence that answers in other words than the
        question's ("how much did they bring in" for "net revenues were $96.6 million") shares few of its terms."""
        if len(by_words) < 2:
            return list(by_words)
        said = [j for j, (i, _) in enumerate(by_words) if texts[i].strip()]
        close = np.full(len(by_words), np.nan)
        close[said] = self.closeness([texts[by_words[j][0]] for j in said])
        close[np.isnan(close)] = np.nanmin(close) if said else 0.0
        words = scaled([s for _, s in by_words])
        mixed = [(1 - weight) * w + weight * c for w, c in zip(words, scaled(close.tolist()), strict=True)]
        ranks = sorted(range(len(by_words)), key=lambda j: (-mixed[j], j))
        return [(by_words[j][0], mixed[j]) for j in ranks]


def sentence_meaning(
    embedder: Embedder | None, asked: Any = None, cache: VectorCache | None = None, *, question: str = ""
) -> SentenceMeaning | None:
    """Sentences weighed by meaning for a question (its vector ``asked``, else ``question`` embedded now), where
    ``embedder`` runs on this device; None where there is none, or where it runs on another machine: it would be
    sent the documents' sentences at every question (what was sent when they were added is the library's; this
    would be each run's)."""
    if embedder is None or not on_this_device(embedder.address):
        return None
    vector = asked if asked is not None else embedder.embed([question], query=True)[0]
    return SentenceMeaning(embedder, vector, cache)


def scaled(values: Sequence[float]) -> list[float]:
    """``values`` scaled to 0..1 (all 0 where they are all equal)."""
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high > low else 0.0 for v in values]


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


VECTOR_CACHE_FILE = "vectors.sqlite"
"""The cache of loaded documents' chunk vectors, in ``minions.paths.cache_dir()``."""


class VectorCache:
    """Chunk vectors kept by model and by the hash of the text embedded (a SQLite file; ``":memory:"`` for one that
    lives as long as the object). A file read again, or the same chunk in another run, is not embedded again.
    ``mark``/``set_mark`` keep a note beside the vectors (how far a library's sentences were embedded ahead of its
    questions: ``sentence_vectors``), so that the note goes where the vectors go. Write-ahead logged: a question
    reads it while the background process writes."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = str(path if path is not None else user_cache_path())
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT, digest TEXT, vec BLOB NOT NULL, "
                "PRIMARY KEY (model, digest))"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS marks (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def mark(self, key: str) -> str | None:
        """The note kept under ``key`` (None: none)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM marks WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_mark(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO marks VALUES (?, ?)", (key, value))

    def vectors(self, embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
        """``texts``' vectors (one row each) by ``embedder``: those cached read, the others embedded and kept."""
        digests = [text_digest(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(digests), 500):
                part = digests[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT digest, vec FROM vectors WHERE model = ? AND digest IN ({marks})", [embedder.name, *part]
                )
                found |= {d: np.frombuffer(v, dtype=np.float16).astype(np.float32) for d, v in rows}
        missing = list(dict.fromkeys(d for d in digests if d not in found))
        if missing:
            at = {d: i for i, d in enumerate(digests)}
            made = embedder.embed([texts[at[d]] for d in missing])
            found |= dict(zip(missing, (np.asarray(v, dtype=np.float32) for v in made), strict=True))
            # one transaction: in autocommit each row was a transaction of its own, synced to disk (a new
            # question's 160 sentences took 173 ms to keep at 10x the filings, as long as embedding them)
            with write_transaction(self._db, self._lock) as db:
                db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                    [(embedder.name, d, found[d].astype(np.float16).tobytes()) for d in missing],
                )
        return np.stack([found[d] for d in digests]) if digests else np.zeros((0, 0), dtype=np.float32)


@functools.cache
def _cache_at(path: str) -> VectorCache:
    """The cache file at ``path``, opened once a process, not at each question."""
    return VectorCache(path)


def user_cache() -> VectorCache:
    """The user's cache file (``user_cache_path``)."""
    return _cache_at(str(user_cache_path()))


def user_cache_path() -> Path:
    """Where the user's cache file is (``minions.paths.cache_dir``), opened or not."""
    return cache_dir() / VECTOR_CACHE_FILE


def text_digest(text: str) -> str:
    """What a text is kept under in a ``VectorCache`` (its SHA-256, in hex)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def rank_loaded(
    chunks: Sequence[Chunk],
    words: Sequence[Ranked],
    question: str,
    embedder: Embedder,
    *,
    cache: VectorCache | None = None,
    weight: float = MEANING_WEIGHT,
) -> list[Ranked]:
    """``chunks`` (of documents not in a library) ranked as a library ranks its own: ``words`` (every chunk, best
    first by words: ``ranking.lexical_rank``) fused with the chunks closest to ``question`` in meaning (``fuse``),
    pages spread. Each chunk is embedded with its header (``chunk_header``), through ``cache``."""
    texts = [f"{chunk_header(c.document, None, c.section)}\n{c.text}" for c in chunks]
    vectors = (cache or user_cache()).vectors(embedder, texts)
    asked = embedder.embed([question], query=True)[0]
    cosine = vectors @ np.asarray(asked, dtype=np.float32).reshape(-1)
    place = {(c.document, c.index): i for i, c in enumerate(chunks)}
    by_words = list(words[:MEANING_DEPTH])
    closeness = [float(cosine[place[(r.chunk.document, r.chunk.index)]]) for r in by_words]
    nearest = sorted(range(len(chunks)), key=lambda i: (-float(cosine[i]), i))[:MEANING_DEPTH]
    near = [Ranked(chunks[i], float(cosine[i])) for i in nearest]
    fused = spread_pages(fuse(by_words, closeness, near, weight=weight))
    fused = spread_pages(by_sentence(fused, asked, embedder, cache))
    kept = {(r.chunk.document, r.chunk.index) for r in fused}
    return fused + [r for r in words if (r.chunk.document, r.chunk.index) not in kept]
