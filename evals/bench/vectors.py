"""``minions bench vectors``: a question's nearest chunks by brute force (``search.vectors.nearest``, one matrix
product) against the HNSW graph (``search.ann``), at library sizes, in one process.

The vectors are synthetic, of length 1 and ``dimension`` long, drawn around one centre each ``per_cluster`` of them
(a library's chunks gather by document and topic; vectors with no neighbours closer than the rest would be the
graph's worst case and no library's: there recall@50 fell to 0.8 and the build took ten times longer), stored as
float16 and read back as float32 as the index does. The questions are rows of the matrix moved a little (a question
lies near the chunks that answer it). Per size: the graph's build time and memory, each search's median time over
the same questions, their ratio, and the recall@k of the graph against the exact top k (mean and lowest). The first
line says the load.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from minions.protocols.search.ann import approximate
from minions.protocols.search.vectors import VectorMatrix, nearest

from .machine import load_avg, machine
from .options import option

__all__ = ["VectorsBenchConfig", "synthetic_matrix", "vectors_bench"]


@dataclass(frozen=True)
class VectorsBenchConfig:
    sizes: tuple[int, ...] = option(
        (34_000, 100_000, 340_000),
        "vectors in the library, one run each (34,274: the 74 FinanceBench filings; 340,000: ten times them)",
        flag="--size",
        repeat=True,
    )
    dimension: int = 384
    """all-MiniLM-L6-v2's and bge-small's length."""
    questions: int = option(200, "questions timed per size")
    k: int = option(50, "chunks a search returns (rank.MEANING_DEPTH's order)")
    per_cluster: int = 250
    """Vectors around each centre (a 10-K's 460 chunks share a company, a year and a few topics)."""
    seed: int = 0


def synthetic_matrix(n: int, config: VectorsBenchConfig, rng: np.random.Generator) -> VectorMatrix:
    """``n`` unit vectors around ``n / config.per_cluster`` centres, through float16 as stored."""
    clusters = max(1, n // config.per_cluster)
    centres = rng.standard_normal((clusters, config.dimension), dtype=np.float32)
    rows = centres[rng.integers(0, clusters, n)] + 0.9 * rng.standard_normal((n, config.dimension), np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ids = np.arange(1, n + 1, dtype=np.int64)
    return VectorMatrix(ids, ids // 500, ids % 500, rows.astype(np.float16).astype(np.float32))


def vectors_bench(config: VectorsBenchConfig) -> Iterator[dict[str, Any]]:
    yield machine() | {"k": config.k}
    rng = np.random.default_rng(config.seed)
    for n in config.sizes:
        matrix = synthetic_matrix(n, config, rng)
        picks = matrix.rows[rng.integers(0, n, config.questions)]
        asked = picks + 0.05 * rng.standard_normal(picks.shape, dtype=np.float32)
        asked /= np.linalg.norm(asked, axis=1, keepdims=True)
        started = time.perf_counter()
        graph = approximate(matrix.chunks, matrix.rows, at_least=0)
        build = time.perf_counter() - started
        if graph is None:
            yield {"size": n, "error": "faiss is not installed (pip install 'minions[meaning]')"}
            return
        exact_s, approx_s, recall = [], [], []
        for q in asked:
            t0 = time.perf_counter()
            exact = nearest(matrix, q, None, config.k, exact=True)
            t1 = time.perf_counter()
            found = graph.search(q, config.k)
            t2 = time.perf_counter()
            exact_s.append(t1 - t0)
            approx_s.append(t2 - t1)
            recall.append(len({c for c, _ in exact} & set(found.tolist())) / config.k)
        brute, ann = statistics.median(exact_s), statistics.median(approx_s)
        yield {"size": n, "brute_ms": round(brute * 1000, 2), "ann_ms": round(ann * 1000, 3),
               "speedup": round(brute / ann, 1), f"recall@{config.k}": round(statistics.fmean(recall), 4),
               "recall_min": round(min(recall), 2), "build_s": round(build, 1),
               "ann_mb": round(graph.memory_bytes() / 1e6, 1), "matrix_mb": round(matrix.rows.nbytes / 1e6, 1),
               "load": load_avg()}  # fmt: skip
