"""An approximate nearest-neighbour index over a library's meaning vectors, for libraries past ``ANN_FROM`` chunks.

Below that size a question is scored against every vector with one matrix product (``vectors.nearest``: exact,
and faster); past it, an HNSW graph (faiss, the ``meaning`` extra) finds the closest chunks by visiting a few
thousand of them. The graph is built from the matrix at the first question after the matrix is read, and grows
with it as vectors are appended (``VectorMatrix.appended``); it is keyed by chunk id, so a matrix sorted again
keeps it. Its hits are scored again exactly from the matrix's rows: only which chunks come back is approximate.

faiss (``IndexHNSWSQ``, vectors kept as float16), not usearch: usearch 2.26's module imported before ONNX Runtime
makes ONNX Runtime's import crash the process (a segmentation fault, in either's wheel as installed here).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ANN_FROM", "Approximate", "approximate"]

log = logging.getLogger(__name__)

ANN_FROM = 800_000
"""Vectors from which a search of the whole library asks the HNSW graph. Measured (``minions bench vectors``; 2
shared cores at load 7, 384 dimensions, k=50, 200 questions): brute force 11.3 / 22.8 / 60.9 ms median at 34k /
100k / 340k vectors, the graph 0.7 / 1.1 / 1.5 ms with recall@50 0.999 / 0.999 / 0.980 (lowest question 0.98 /
0.98 / 0.0), built in 5 / 32 / 184 s, 68 / 152 / 659 MB beside the matrix's 52 / 154 / 522 MB. Each search is
15-40 times faster by the graph, but it is built again at the first search after each matrix reload (minutes past
100k, on the question's time), it misses chunks, and brute force stays within the 150 ms search target up to about
800k (linear in the rows: 61 ms at 340k). So: the graph where brute force no longer keeps the target; below it,
every search is exact, the same as before."""
CONNECTIVITY = 16
"""Neighbours a node keeps (HNSW's M)."""
EXPANSION_ADD = 64
"""Candidates weighed while a vector is linked into the graph (efConstruction)."""
EXPANSION_SEARCH = 256
"""Candidates a search keeps (ef; at least the ``k`` asked): at 34k vectors 128 gave recall@50 0.994 with one
question of 200 at 0, 256 gave 0.999 and none below 0.98 (0.7 ms a search)."""


class Approximate:
    """An HNSW graph of float16 vectors keyed by chunk id, inner product (the vectors are of length 1). A chunk
    given a vector again keeps its old node too (HNSW cannot remove one): hits are told once, and scored from the
    matrix's current rows."""

    def __init__(self, dimension: int) -> None:
        import faiss

        self._faiss: Any = faiss  # its stubs type QT_fp16 as an int where IndexHNSWSQ takes it
        graph = self._faiss.IndexHNSWSQ(
            dimension, faiss.ScalarQuantizer.QT_fp16, CONNECTIVITY, faiss.METRIC_INNER_PRODUCT
        )
        graph.hnsw.efConstruction = EXPANSION_ADD
        graph.hnsw.efSearch = EXPANSION_SEARCH
        graph.train(np.zeros((1, dimension), dtype=np.float32))  # float16 needs no statistics; faiss asks for it
        self.index: Any = faiss.IndexIDMap(graph)
        self.graph = graph

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def add(self, chunks: npt.NDArray[np.int64], rows: npt.NDArray[np.float32]) -> None:
        """Link ``rows`` into the graph under the ids ``chunks``."""
        if len(chunks) == 0:
            return
        vectors = np.ascontiguousarray(rows, dtype=np.float32)
        self._faiss.omp_set_num_threads(os.cpu_count() or 1)  # a build links many vectors at once: every core
        self.index.add_with_ids(vectors, np.ascontiguousarray(chunks, dtype=np.int64))

    def search(self, query: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.int64]:
        """The ids of (about) the ``k`` chunks closest to ``query``, closest first, each once."""
        self.graph.hnsw.efSearch = max(EXPANSION_SEARCH, k)
        self._faiss.omp_set_num_threads(1)  # one question: threads cost more than they give (10 ms against 0.5 ms)
        _, found = self.index.search(np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1), k)
        ids = found[0][found[0] >= 0]
        return ids[np.sort(np.unique(ids, return_index=True)[1])].astype(np.int64)

    def memory_bytes(self) -> int:
        """The vectors (float16) and the graph's links (level 0: 2M a node, as int32), about."""
        n, links = len(self), 2 * CONNECTIVITY * 4 + 8
        return n * (self.graph.d * 2 + links)


def approximate(
    chunks: npt.NDArray[np.int64], rows: npt.NDArray[np.float32], *, at_least: int | None = None
) -> Approximate | None:
    """A graph of ``rows`` (keyed by ``chunks``), or None below ``at_least`` rows (default ``ANN_FROM``) or without
    faiss installed (then every search is exact)."""
    if len(chunks) < (ANN_FROM if at_least is None else at_least) or importlib.util.find_spec("faiss") is None:
        return None
    started = time.perf_counter()
    graph = Approximate(int(rows.shape[1]))
    graph.add(chunks, rows)
    log.info("approximate index of %d vectors built in %.1f s", len(chunks), time.perf_counter() - started)
    return graph
