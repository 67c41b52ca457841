"""The cost bench, on a FinanceBench-shaped folder with scripted models."""

from __future__ import annotations

import json

from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.evals.bench import cost as bench

from ...protocols.helpers import final, job_reply, make_text, plan


def test_cost_bench_counts_remote_only_and_measures_minions(tmp_path, monkeypatch, remote):
    (tmp_path / "data").mkdir()
    (tmp_path / "pdfs").mkdir()
    rows = [{"question": f"Q{i}: revenue in fiscal 2023?", "doc_name": f"DOC{i}", "answer": "$4.2B"} for i in range(4)]
    rows.insert(1, {**rows[0], "question": "Q0 again"})  # one question per filing
    (tmp_path / "data" / "financebench_open_source.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    for i in (0, 2, 3):  # DOC1 is missing: skipped
        (tmp_path / "pdfs" / f"DOC{i}.pdf").write_bytes(b"%PDF")
    monkeypatch.setattr(bench, "load_document", lambda p: Document.from_text(make_text(60), name=p.name))
    remote.enqueue(*[r for _ in range(2) for r in (plan(), final())])

    out = bench.cost_bench(tmp_path, items=2, local=ScriptedBackend("scripted/l", responder=job_reply), remote=remote)

    assert out["items"] == 2 and [r["doc_name"] for r in out["per_item"]] == ["DOC0", "DOC2"]
    assert out["remote_input_tokens_remote_only"] > out["remote_input_tokens_minions"] > 0
    assert out["ratio"] == round(out["remote_input_tokens_remote_only"] / out["remote_input_tokens_minions"], 1)
    assert all(r["jobs"] <= bench.BENCH_OPTIONS["max_jobs_per_round"] for r in out["per_item"])


def test_the_engine_bench_sends_the_production_job_prompt_and_schema():
    from minions.chunking import Chunk
    from minions.evals.bench.engine import BenchConfig
    from minions.protocols.evidence.jobs import job_request

    chunks = ["Net sales were $32.8 billion in 2018. Operating income was $7.2 billion.", make_text(2)]
    config = BenchConfig(instructions=("What were net sales?", "Which risks are mentioned?"), max_tokens=40)
    requests = bench.production_jobs(chunks, config)

    assert len(requests) == 4  # every instruction over every chunk, chunk by chunk
    for i, request in enumerate(requests):
        k, instruction = divmod(i, 2)[0], config.instructions[i % 2]
        chunk = Chunk("bench", k, chunks[k], 0, len(chunks[k]))
        assert request.messages == job_request(instruction, chunk, request.params).messages
        quotes = [a["properties"]["quote"]["const"] for a in request.params.json_schema["anyOf"]]
        assert quotes and (k == 1 or "Net sales were $32.8 billion in 2018." in quotes)  # the chunk's sentences
        assert request.params.max_tokens == 40 and request.params.temperature == 0.0
    assert requests[0].prefix == requests[1].prefix  # jobs over one chunk share its prefix
