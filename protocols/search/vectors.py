"""The chunks' meaning vectors, in the library's own index file beside their text (``search.index``).

One row a chunk in ``chunk_vectors``: its id and its vector as float16 (384 dimensions: 768 bytes; the 34,274
chunks of 74 10-Ks take 26 MB). The meta rows ``embedder`` and ``embedder_dim`` name the model that made them and
their length: a question of another model is refused, and vectors of another model are dropped when the library
embeds with a new one, and computed again. A search reads them once into one float32 matrix (kept until the index
changes; vectors added through the index are appended to it, ``VectorMatrix.appended``) and scores a question
against every chunk of the documents it searches with one matrix product: numpy, no SQLite extension (this
machine's Python cannot load one). Past ``ann.ANN_FROM`` vectors a search of the whole library asks an HNSW graph
of them instead (``search.ann``), built at the first search and grown as vectors are appended; below it, and for a
search of some documents, every vector is scored.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .ann import Approximate, approximate

__all__ = [
    "LOAD_BATCH",
    "SCHEMA",
    "VectorMatrix",
    "load_matrix",
    "nearest",
    "similarities",
    "store_vectors",
    "unembedded",
]

LOAD_BATCH = 8192
"""How many vectors ``load_matrix`` reads at a time."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk_vectors (
    chunk INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    vec BLOB NOT NULL
);
"""


@dataclass(frozen=True)
class VectorMatrix:
    """Every stored vector: chunk ids, their documents' ids, their places in their documents, and the vectors as
    rows (float32)."""

    chunks: npt.NDArray[np.int64]
    documents: npt.NDArray[np.int64]
    places: npt.NDArray[np.int64]
    rows: npt.NDArray[np.float32]

    def appended(
        self,
        chunks: npt.NDArray[np.int64],
        documents: npt.NDArray[np.int64],
        places: npt.NDArray[np.int64],
        rows: npt.NDArray[np.float32],
    ) -> VectorMatrix:
        """This matrix with more rows after its own, copied in place where its buffers have room (they grow by
        half again when full, so adding n vectors a batch at a time copies O(n), not a reload per batch). Only
        the newest matrix may be appended to: an older one shares the buffers."""
        n, more = len(self.chunks), len(chunks)
        buffers = [_buffer(a) for a in (self.chunks, self.documents, self.places, self.rows)]
        if n + more > len(buffers[0]):
            size = max(n + more, n + n // 2, 1024)
            grown = []
            for old in buffers:
                bigger = np.empty((size, *old.shape[1:]), dtype=old.dtype)
                bigger[:n] = old[:n]
                grown.append(bigger)
            buffers = grown
        for buffer, new in zip(buffers, (chunks, documents, places, rows), strict=True):
            buffer[n : n + more] = new
        c, d, p, r = (buffer[: n + more] for buffer in buffers)
        out = VectorMatrix(c, d, p, r)
        if (graph := self.__dict__.get("ann")) is not None:  # built already: grown, not built again
            graph.add(chunks, rows)
            out.__dict__["ann"] = graph
        return out

    def reordered(self, order: npt.NDArray[np.int64]) -> VectorMatrix:
        """The same rows in ``order``, and the same graph (it is keyed by chunk id, not by row)."""
        out = VectorMatrix(self.chunks[order], self.documents[order], self.places[order], self.rows[order])
        if "ann" in self.__dict__:
            out.__dict__["ann"] = self.__dict__["ann"]
        return out

    @functools.cached_property
    def ann(self) -> Approximate | None:
        """The HNSW graph of the rows, past ``ann.ANN_FROM`` of them (None below: searches score every row); built at
        the first search that asks for it, grown by ``appended``."""
        return approximate(self.chunks, self.rows)

    @functools.cached_property
    def row_of(self) -> dict[tuple[int, int], int]:
        """Each chunk's row, by (document id, place)."""
        return {(int(d), int(p)): i for i, (d, p) in enumerate(zip(self.documents, self.places, strict=True))}


def _buffer(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The array ``array`` is the first rows of (itself where it is not such a view)."""
    base = array.base
    if not isinstance(base, np.ndarray) or base.dtype != array.dtype or base.shape[1:] != array.shape[1:]:
        return array
    return base if array.ctypes.data == base.ctypes.data else array


def unembedded(db: sqlite3.Connection, limit: int, after: int = 0) -> list[tuple[int, str, str, str | None]]:
    """Up to ``limit`` chunks after chunk id ``after`` that have no vector yet: (chunk id, document name, text,
    section), in index order. A build passes the last id it got, so each batch starts where the last stopped
    (from the first chunk each time, a build's lookups grow with the square of its chunks)."""
    return db.execute(
        "SELECT c.id, d.name, c.text, c.section FROM chunks c JOIN documents d ON d.id = c.doc "
        "WHERE c.id > ? AND NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk = c.id) ORDER BY c.id LIMIT ?",
        (after, limit),
    ).fetchall()


def store_vectors(db: sqlite3.Connection, chunks: Sequence[int], vectors: npt.NDArray[np.float32]) -> None:
    """Keep ``vectors`` (one row a chunk of ``chunks``) as float16; a chunk deleted meanwhile is skipped."""
    half = np.asarray(vectors, dtype=np.float16)
    db.executemany(
        "INSERT OR REPLACE INTO chunk_vectors (chunk, vec) "
        "SELECT ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?)",
        [(int(c), half[i].tobytes(), int(c)) for i, c in enumerate(chunks)],
    )


def load_matrix(db: sqlite3.Connection) -> VectorMatrix | None:
    """Every stored vector, or None when there is none. Read a batch at a time into matrices made to size: read
    whole, the rows, their bytes joined and the float32 copy were alive at once, twice the matrix's memory again
    at its peak (343,068 vectors: 1,135 MB for a 503 MB matrix)."""
    query = "FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk"
    size = int(db.execute(f"SELECT count(*) {query}").fetchone()[0])
    cursor = db.execute(f"SELECT v.chunk, c.doc, c.idx, v.vec {query} ORDER BY v.chunk")
    columns: list[npt.NDArray[Any]] = []
    n = 0
    while batch := cursor.fetchmany(LOAD_BATCH):
        if not columns:
            dimension = len(batch[0][3]) // np.dtype(np.float16).itemsize
            columns = [np.empty(size, np.int64) for _ in range(3)] + [np.empty((size, dimension), np.float32)]
        if n + len(batch) > len(columns[0]):  # written since it was counted
            columns = [np.concatenate([c, np.empty((len(batch), *c.shape[1:]), c.dtype)]) for c in columns]
        for i in range(3):
            columns[i][n : n + len(batch)] = [r[i] for r in batch]
        columns[3][n : n + len(batch)] = np.frombuffer(b"".join(r[3] for r in batch), np.float16).reshape(
            len(batch), -1
        )
        n += len(batch)
    if n == 0:
        return None
    ids, docs, places, rows = (c[:n] for c in columns)
    return VectorMatrix(ids, docs, places, rows)


def similarities(
    matrix: VectorMatrix, query: npt.NDArray[np.float32], chunks: Sequence[tuple[int, int]]
) -> list[float | None]:
    """The cosine of ``query`` to each of ``chunks`` (document id, place in it), None where one has no vector."""
    if query.shape[-1] != matrix.rows.shape[1]:
        return [None] * len(chunks)
    rows = [matrix.row_of.get(c) for c in chunks]
    found = [r for r in rows if r is not None]
    scores = matrix.rows[found] @ query.reshape(-1) if found else np.zeros(0, dtype=np.float32)
    by_row = dict(zip(found, scores.tolist(), strict=True))
    return [by_row[r] if r is not None else None for r in rows]


def nearest(
    matrix: VectorMatrix,
    query: npt.NDArray[np.float32],
    documents: Sequence[int] | None,
    k: int,
    *,
    exact: bool = False,
) -> list[tuple[int, float]]:
    """The ``k`` chunks (of ``documents``' ids; None: all) whose vectors are closest to ``query`` (cosine, both of
    length 1): (chunk id, similarity), closest first, ties by chunk id. Over the whole library past ``ANN_FROM``
    vectors by the graph (``exact``: every vector scored all the same, as below it)."""
    if query.shape[-1] != matrix.rows.shape[1]:
        return []  # vectors of another model than the question's: nothing comparable
    if not exact and documents is None and 0 < k < len(matrix.chunks) and matrix.ann is not None:
        return _approximate_nearest(matrix, matrix.ann, query, k)
    keep = np.isin(matrix.documents, np.asarray(documents, dtype=np.int64)) if documents is not None else None
    rows = matrix.rows if keep is None else matrix.rows[keep]
    ids = matrix.chunks if keep is None else matrix.chunks[keep]
    if len(ids) == 0 or k <= 0:
        return []
    scores = rows @ query.reshape(-1)
    top = np.argpartition(-scores, min(k, len(ids)) - 1)[:k] if k < len(ids) else np.arange(len(ids))
    order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), int(ids[i])))
    return [(int(ids[i]), float(scores[i])) for i in order]


def _approximate_nearest(
    matrix: VectorMatrix, graph: Approximate, query: npt.NDArray[np.float32], k: int
) -> list[tuple[int, float]]:
    """``nearest`` over the whole library by the graph: which chunks are found is approximate, their scores are
    exact (their rows, found by chunk id: the matrix is sorted by it)."""
    ids = graph.search(query, k)
    scores = matrix.rows[np.searchsorted(matrix.chunks, ids)] @ query.reshape(-1)
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), int(ids[i])))
    return [(int(ids[i]), float(scores[i])) for i in order]
