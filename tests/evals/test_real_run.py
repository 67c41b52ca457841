"""A real evaluation: SmolLM2 in-process as the local model, and SmolLM2 behind a real OpenAI-compatible
server (llama-cpp-python's) as the remote one, over a FinanceBench 8-K filing and an L-Eval paper.

The remote model is priced like gpt-4o (MINIONS_PRICES) so that the report's dollar ratios mean something,
and declared with a 2,048-token window (the server has 4,096; SmolLM2's tokenizer counts more tokens than the
estimate) so that remote-only reads a short prefix. It gets REMOTE_TIMEOUT_S a request: the server computes one
request at a time on the same two shared cores, and with other work on them (load 15) remote-only's 2,400-token
call took 119 to 189 s, past the default's 120 s (the timeout itself is tested in tests/backends). The protocols
are bounded (one round, few local jobs, no retries) to keep this to a few minutes on two shared cores; with a 135M
model as the "frontier" model the scores are not the point: the JSONL, the table and the plot are.
"""

from __future__ import annotations

import json

import pytest

from minions.backends.openai import OpenAIBackend, Provider
from minions.backends.registry import resolve
from minions.evals import load_dataset, read_results, run_eval, write_report

from .conftest import DATA, needs

pytestmark = [
    pytest.mark.slow,
    needs("financebench/pdfs/PEPSICO_2023_8K_dated-2023-05-05.pdf", "leval/scientific_qa.jsonl"),
]

ITEMS = {
    "financebench": ("financebench", ["financebench_id_01482"]),  # PepsiCo 8-K, 4 pages
    "leval-scientific": ("leval", ["scientific_qa:3:0"]),  # the shortest paper (12k characters)
}
PROTOCOLS = ("remote", "minions")
OPTIONS = {"max_rounds": 1, "max_jobs_per_round": 4, "top_k": 2, "max_retries": 0, "remote_max_tokens": 512,
           "job_max_tokens": 64}  # fmt: skip
REMOTE_TIMEOUT_S = 600.0


def test_real_models_produce_results_table_and_plot(openai_server, tmp_path, monkeypatch) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"smollm2": [2.50, 1.25, 10.00]}))
    monkeypatch.setenv("MINIONS_PRICES", str(prices))
    local = resolve("llamacpp/default")
    server = Provider("openai-compatible", openai_server, key_env=None)
    remote = OpenAIBackend("smollm2", provider=server, context_window=2048, timeout=REMOTE_TIMEOUT_S)
    paths = []
    for name, (folder, ids) in ITEMS.items():
        dataset = load_dataset(name, DATA / folder)
        for protocol in PROTOCOLS:
            out = tmp_path / f"{name}-{protocol}.jsonl"
            run_eval(dataset, protocol, local, remote, out, ids=ids, protocol_options=OPTIONS)
            paths.append(out)
            (record,) = read_results(out)
            assert record["error"] is None, record["error"]
            assert record["remote"] == "openai-compatible/smollm2" and record["local"] == local.name
            assert record["usage"]["remote"]["calls"] >= 1 and record["egress_bytes"] > 0
            assert record["cost_usd"]["remote"] > 0, record["notes"]  # a remote call that failed has no usage
            assert 0.0 <= record["score"] <= 1.0
            recall = record["evidence"]["recall_at_5"]
            if name == "financebench":  # its evidence: page 4 of the 8-K
                assert record["evidence"]["gold"] == 1 and recall in (0.0, 1.0)
            else:  # L-Eval marks no evidence
                assert record["evidence"]["gold"] == 0 and recall is None
    md, png = write_report(paths, tmp_path / "report")
    text = md.read_text()
    print(text)  # shown with -s: the table of a real run
    assert png.read_bytes().startswith(b"\x89PNG")
    for name in ITEMS:
        assert f"## {name}" in text
    rows = [line for line in text.splitlines() if line.startswith(("| remote |", "| minions |"))]
    assert len(rows) == 8  # a row of each in the table and in the evidence table
    assert sum("| 1 | 0 |" in row for row in rows) == 4  # one item each, none failed
