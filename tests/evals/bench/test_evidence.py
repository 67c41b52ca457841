"""``minions bench evidence`` on the shared FinanceBench checkout: recall curves from the benchmark's own gold."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from minions.evals.bench.evidence import EvidenceBenchConfig, evidence_bench

from ..conftest import DATA, needs

FB = DATA / "financebench"
CAPEX = "financebench_id_03029"  # 3M 2018 capital expenditure: the cash flow statement, page 60


@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/3M_2018_10K.pdf")
def test_lexical_curves_per_item_and_in_the_summary():
    lines = list(evidence_bench(FB, EvidenceBenchConfig(ids=(CAPEX,), lexical_only=True)))
    item, summary = lines
    assert item["item_id"] == CAPEX and item["gold_pages"] == [60] and item["pages"] == 160
    for curve in ("pages_bm25", "rag"):
        values = [item[curve][f"@{k}"] for k in (1, 5, 10, 20)]
        assert values == sorted(values) and all(v in (0.0, 1.0) for v in values)  # one gold page: found or not
    assert item["rag"]["@20"] == 1.0  # the cash flow statement is among the 20 chunks that rank best
    assert "shown" not in item and summary["summary"] and summary["items"] == 1
    assert summary["rag"] == item["rag"] and summary["shown"] is None and not summary["scored"]


@pytest.mark.slow
@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/3M_2018_10K.pdf")
def test_the_local_side_passes_on_what_it_read_with_its_pages(benchmark_data):
    # no --data: the command finds the checkout through $MINIONS_DATA, as a user's would
    out = subprocess.run(
        [sys.executable, "-m", "minions", "bench", "evidence", "--id", CAPEX, "--items", "--read-chunks", "3"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    item, summary = (json.loads(line) for line in out.stdout.splitlines())
    # the model reads the best chunk and those within its budget of prompt tokens; it quotes the others by words
    read = item["read"]
    assert len(read) == 3 and read[0]["score"] is not None and not read[0]["by_words"]
    assert all((r["score"] is None) == r["by_words"] for r in read)
    assert all(set(r["quote_pages"]) <= set(r["pages"]) for r in item["read"])  # a quote lies in its chunk
    assert set(item["shown"]) == {"@1", "@5", "@10", "@20"} and item["shown"]["@5"] == item["shown"]["@20"]
    assert item["ranking"]["@1"] == item["rag"]["@1"]  # the model picks sentences, it leaves the ranking alone
    assert len(item["cited_pages"]) <= 3 and item["rank_s"] >= 0 and item["wall_s"] > 0
    assert summary["shown"] == item["shown"] and summary["scored"]


@pytest.mark.slow
@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/3M_2018_10K.pdf")
def test_meaning_curves_alone_and_fused_at_each_weight():
    config = EvidenceBenchConfig(ids=(CAPEX,), lexical_only=True, meaning=True, meaning_weights=(0.5, 1.0))
    item, summary = evidence_bench(FB, config)
    assert set(item["fused"]) == {"0.5", "1"} and set(item["meaning"]) == {"@1", "@5", "@10", "@20"}
    for curve in (item["meaning"], *item["fused"].values()):
        values = list(curve.values())
        assert values == sorted(values) and all(v in (0.0, 1.0) for v in values)
    assert summary["meaning"] == item["meaning"] and summary["fused"] == item["fused"]
    assert summary["meaning_weights"] == [0.5, 1.0] and summary["library_fused"] is None
