"""``minions bench evidence --compare-local``: the embedded engine and a llama-cpp-python server serving the same
GGUF file read the same chunks of a FinanceBench filing, and quote the same sentences."""

from __future__ import annotations

import pytest

from minions.evals.bench.evidence import EvidenceBenchConfig, evidence_bench

from ..conftest import DATA, needs

FB = DATA / "financebench"
CAPEX = "financebench_id_03029"  # 3M 2018 capital expenditure: the cash flow statement, page 60


@pytest.mark.slow
@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/3M_2018_10K.pdf")
def test_a_server_quotes_what_the_embedded_engine_quotes(openai_server: str) -> None:
    server = f"openai-compatible/smollm2@{openai_server}"
    config = EvidenceBenchConfig(ids=(CAPEX,), read_chunks=4, compare_local=server)
    item, summary = evidence_bench(FB, config)
    compared = item["compare"]
    assert compared["error"] is None and compared["read"] == 4
    # the same sentence of every chunk read (10 of 10 with ten read chunks), so the same pages passed on
    assert compared["same_quotes"] == 4 and compared["shown"] == item["shown"]
    assert summary["same_quotes"] == {"same": 4, "read": 4, "rate": 1.0}
    assert summary["compare_shown"] == summary["shown"]
    print(f"\nwall time: embedded {item['wall_s']}s, server {compared['wall_s']}s")
