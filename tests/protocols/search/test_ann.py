"""The approximate index: off below ``ANN_FROM`` (every search exact, as before), and past it the same chunks as
brute force on a library small enough to check, grown as vectors are appended and kept when the matrix is sorted."""

from __future__ import annotations

import numpy as np
import pytest

from minions.evals.bench.vectors import VectorsBenchConfig, synthetic_matrix
from minions.protocols.search import ann
from minions.protocols.search.vectors import VectorMatrix, nearest

pytest.importorskip("faiss")


def _matrix(n: int) -> VectorMatrix:
    return synthetic_matrix(n, VectorsBenchConfig(dimension=32, per_cluster=50), np.random.default_rng(7))


def _brute(matrix: VectorMatrix, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    return nearest(matrix, query, None, k, exact=True)


def test_below_the_size_measured_no_graph_is_built_and_every_vector_is_scored() -> None:
    matrix = _matrix(600)
    assert len(matrix.chunks) < ann.ANN_FROM and matrix.ann is None
    query = matrix.rows[5]
    assert nearest(matrix, query, None, 10) == _brute(matrix, query, 10)


def test_past_it_the_graph_finds_what_brute_force_finds_and_grows_with_the_matrix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ann, "ANN_FROM", 500)
    matrix = _matrix(600)
    graph = matrix.ann
    assert graph is not None and len(graph) == 600
    for row in (0, 123, 599):
        query = matrix.rows[row]
        found, exact = nearest(matrix, query, None, 10), _brute(matrix, query, 10)
        assert [c for c, _ in found] == [c for c, _ in exact] and found[0][0] == matrix.chunks[row]
        assert [s for _, s in found] == pytest.approx([s for _, s in exact], abs=1e-6)  # scored again, exactly
    new = np.zeros((1, 32), dtype=np.float32)
    new[0, 3] = 1.0  # a direction no other vector leans to as far
    grown = matrix.appended(np.asarray([10_000]), np.asarray([99]), np.asarray([0]), new)
    assert grown.ann is graph and len(graph) == 601
    assert nearest(grown, new[0], None, 3)[0] == (10_000, pytest.approx(1.0))
    early = grown.appended(np.asarray([0]), np.asarray([99]), np.asarray([1]), -new)  # an id before the others
    resorted = early.reordered(np.argsort(early.chunks, kind="stable"))
    assert resorted.ann is graph and nearest(resorted, -new[0], None, 1)[0] == (0, pytest.approx(1.0))
