"""The chunks' terms as postings, for BM25 at the speed of numpy (``search.index``).

FTS5 finds a phrase fast, but its ``bm25()`` is a function called once for every chunk that holds any of a
question's terms, and each call reads that chunk's length from a table of its own: over ten times the filings
(343,068 chunks) a question whose "if" and "not" are in 30 percent of them took about 260 ms for its best 40 and
30 ms to count them. Here a term's postings are one row per document (``postings``: the term, the document, and
for each chunk of it that holds the term its id, how often, and its length), and a question reads its terms'
rows and scores every chunk at once (``Postings.scores``).

The score is FTS5's BM25 to the last bit (k1 1.2, b 0.75, its idf floored at 1e-6, a chunk's length counted as
FTS5 counts it: its terms and the one token of its ``doc`` column), summed in the question's order of terms, so a
ranking is the one FTS5 gave (``tests/protocols/search/test_postings.py`` compares them).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["IDF_FLOOR", "SCHEMA", "Postings", "Scores", "drop_postings", "store_postings"]

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6
"""FTS5's: a term held by half the chunks or more adds this much, not nothing and not less."""
_RECORD = np.dtype([("chunk", "<i4"), ("count", "<u2"), ("length", "<u2")])
_MOST = np.iinfo(np.uint16).max

SCHEMA = """
CREATE TABLE IF NOT EXISTS postings (
    term TEXT NOT NULL, doc INTEGER NOT NULL, chunks BLOB NOT NULL, PRIMARY KEY (term, doc)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS term_chunks (term TEXT PRIMARY KEY, chunks INTEGER NOT NULL) WITHOUT ROWID;
"""


def store_postings(db: sqlite3.Connection, doc: int, chunks: Sequence[int], terms: Sequence[str]) -> int:
    """Write the postings of document ``doc``, whose chunks ``chunks`` (ids) hold ``terms`` (each chunk's terms,
    space-separated), and count each term's chunks; the length of all its chunks, as BM25 counts it."""
    codes: dict[str, int] = {}
    held: list[int] = []
    owners: list[int] = []
    lengths = np.empty(len(terms), dtype=np.int64)
    for j, text in enumerate(terms):
        words = text.split()
        held.extend(codes.setdefault(w, len(codes)) for w in words)
        owners.extend([j] * len(words))
        lengths[j] = len(words) + 1  # and the doc column's one token, as FTS5 counts a chunk's length
    if not codes:
        return int(lengths.sum())
    width = len(terms)
    pairs, counts = np.unique(np.asarray(held, dtype=np.int64) * width + np.asarray(owners), return_counts=True)
    owner = pairs % width
    records = np.empty(len(pairs), dtype=_RECORD)
    records["chunk"] = np.asarray(chunks, dtype=np.int64)[owner]
    records["count"] = np.minimum(counts, _MOST)
    records["length"] = np.minimum(lengths[owner], _MOST)
    term_of = pairs // width
    starts = np.concatenate(([0], np.flatnonzero(np.diff(term_of)) + 1))
    ends = np.append(starts[1:], len(pairs))
    names = list(codes)
    rows = [(names[term_of[s]], doc, records[s:e].tobytes()) for s, e in zip(starts, ends, strict=True)]
    db.executemany("INSERT INTO postings (term, doc, chunks) VALUES (?, ?, ?)", rows)
    db.executemany(
        "INSERT INTO term_chunks (term, chunks) VALUES (?, ?) "
        "ON CONFLICT(term) DO UPDATE SET chunks = chunks + excluded.chunks",
        [(names[term_of[s]], int(e - s)) for s, e in zip(starts, ends, strict=True)],
    )
    return int(lengths.sum())


def drop_postings(db: sqlite3.Connection, doc: int, vocabulary: Iterable[str]) -> None:
    """Forget the postings of document ``doc``, whose terms are ``vocabulary``."""
    for term in vocabulary:
        row = db.execute("SELECT length(chunks) FROM postings WHERE term = ? AND doc = ?", (term, doc)).fetchone()
        if row is None:
            continue
        db.execute("UPDATE term_chunks SET chunks = chunks - ? WHERE term = ?", (row[0] // _RECORD.itemsize, term))
        db.execute("DELETE FROM postings WHERE term = ? AND doc = ?", (term, doc))
    db.execute("DELETE FROM term_chunks WHERE chunks <= 0")


@dataclass(frozen=True)
class Scores:
    """A question's BM25 over the chunks that hold any of its terms."""

    chunks: npt.NDArray[np.int64]
    """Their ids, ascending."""
    scores: npt.NDArray[np.float64]
    parts: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], float]]
    """For the terms asked to be kept apart: the chunks that hold it, its part of their scores, and its idf over
    the library (floored as FTS5 floors it)."""

    def best(self, k: int) -> list[tuple[int, float]]:
        """The ``k`` best (id, score), best first, ties by id as FTS5's ``ORDER BY score DESC, rowid``."""
        if k <= 0 or not len(self.chunks):
            return []
        if len(self.chunks) > k:
            floor = np.partition(self.scores, len(self.scores) - k)[len(self.scores) - k]
            keep = np.flatnonzero(self.scores >= floor)  # ties at the floor all kept, cut below by id
        else:
            keep = np.arange(len(self.chunks))
        order = keep[np.lexsort((self.chunks[keep], -self.scores[keep]))][:k]
        return [(int(i), float(s)) for i, s in zip(self.chunks[order], self.scores[order], strict=True)]


class Postings:
    """BM25 over the postings of one index's connection (call under its lock)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def scores(
        self, terms: Sequence[str], *, documents: Sequence[int] | None = None, apart: Sequence[str] = ()
    ) -> Scores:
        """Every chunk of ``documents`` (ids; None: all) that holds any of ``terms``, scored as FTS5 scores the
        query of them all ORed, over the whole library (its chunk count, their length, each term's chunks);
        ``apart``: terms whose parts to keep (``Scores.parts``)."""
        count, tokens = self._db.execute(
            "SELECT COALESCE(SUM(chunks), 0), COALESCE(SUM(tokens), 0) FROM documents"
        ).fetchone()
        empty = Scores(np.empty(0, dtype=np.int64), np.empty(0), {})
        if not count:
            return empty
        average = tokens / count
        where, scope = (
            ("", ()) if documents is None else (f" AND doc IN ({','.join('?' * len(documents))})", tuple(documents))
        )
        ids: list[npt.NDArray[np.int64]] = []
        parts: list[npt.NDArray[np.float64]] = []
        kept = {}
        for term in dict.fromkeys(terms):
            row = self._db.execute("SELECT chunks FROM term_chunks WHERE term = ?", (term,)).fetchone()
            if row is None:
                continue
            blobs = self._db.execute(f"SELECT chunks FROM postings WHERE term = ?{where}", (term, *scope)).fetchall()
            if not blobs:
                continue
            records = np.frombuffer(b"".join(b for (b,) in blobs), dtype=_RECORD)
            idf = math.log((count - row[0] + 0.5) / (row[0] + 0.5))
            idf = idf if idf > 0.0 else IDF_FLOOR
            held = records["count"].astype(np.float64)
            length = records["length"].astype(np.float64)
            # FTS5's expression, in its order of operations: idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * D / avgdl))
            part = idf * (held * (K1 + 1.0)) / (held + K1 * (1 - B + B * length / average))
            chunk = records["chunk"].astype(np.int64)
            ids.append(chunk)
            parts.append(part)
            if term in apart:
                kept[term] = (chunk, part, idf)
        if not ids:
            return empty
        every = np.concatenate(ids)
        size = int(every.max()) + 1
        total = np.bincount(every, weights=np.concatenate(parts), minlength=size).astype(np.float64, copy=False)
        matched = np.flatnonzero(np.bincount(every, minlength=size))
        return Scores(matched, total[matched], kept)
