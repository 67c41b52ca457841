"""``minions bench vectors`` on a small library: its lines, and the graph's recall against brute force."""

from __future__ import annotations

import pytest

from minions.evals.bench.vectors import VectorsBenchConfig, vectors_bench

pytest.importorskip("faiss")


def test_the_bench_prints_the_load_then_brute_force_against_the_graph_per_size() -> None:
    head, *sizes = vectors_bench(VectorsBenchConfig(sizes=(400, 800), dimension=16, questions=5, k=10))
    assert head["k"] == 10 and len(head["load"]) == 3
    assert [s["size"] for s in sizes] == [400, 800]
    for line in sizes:
        assert line["recall@10"] >= 0.9 and line["brute_ms"] > 0 and line["ann_ms"] > 0 and line["ann_mb"] > 0
