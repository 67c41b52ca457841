"""``cost_bench``: how many remote input tokens Minions spends on FinanceBench filings, against sending the
whole filing to a long-context remote model (counted, not sent). The CLI runs it as ``minions bench cost``.

The remote-only side is counted with ``minions.tokens.count_tokens`` (the remote model's tokenizer, or
o200k for unknown models); the Minions side is the usage the remote backend reported. When the stand-in
remote is SmolLM2, its tokenizer yields more tokens than o200k for the same text, so the ratio is
conservative.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minions.backends.base import Backend
from minions.backends.registry import default_local, resolve
from minions.chunking import Chunk
from minions.documents import load_document
from minions.errors import ConfigError
from minions.evals.bench.engine import BenchConfig
from minions.evals.financebench import filing_path
from minions.paths import benchmark_data
from minions.protocols.evidence.jobs import Job, job_request
from minions.protocols.evidence.quotes import quote_schema
from minions.protocols.minions_protocol import Minions
from minions.types import ChatRequest, SamplingParams

__all__ = ["BENCH_OPTIONS", "cost_bench", "financebench_items", "production_jobs"]

log = logging.getLogger(__name__)

BENCH_OPTIONS: dict[str, Any] = {
    "max_rounds": 2,
    "max_jobs_per_round": 12,
    "job_max_tokens": 96,
    "remote_max_tokens": 256,
    "max_retries": 0,
    "fallback_plan": True,
}
"""Bounded local work (retrieval fallback past 12 jobs a round) so three filings take minutes on 2 cores; a
stand-in remote too weak to plan still gets its local jobs run, so what is measured is a real round."""


def production_jobs(chunks: Sequence[str], config: BenchConfig) -> list[ChatRequest]:
    """``minions bench engine``'s jobs as the Minions protocol sends them: every instruction over every chunk
    (chunk by chunk), through the production job prompt (``job_request``) with the schema of the chunk's own
    sentences (``quote_schema``), greedy, ``config.max_tokens`` each."""
    if config.order != "chunk-first":
        raise ConfigError("The production job prompt puts the chunk first: --order instruction-first is not it.")
    requests: list[ChatRequest] = []
    for k, text in enumerate(chunks):
        chunk = Chunk("bench", k, text, 0, len(text))
        for instruction in config.instructions:
            job = Job(len(requests), 1, instruction, chunk)
            params = SamplingParams(max_tokens=config.max_tokens, json_schema=quote_schema(job.options))
            requests.append(job_request(instruction, chunk, params))
    return requests


def financebench_items(data_dir: Path, items: int) -> list[dict[str, Any]]:
    """The first ``items`` questions, one per filing, whose filing PDF is in ``data_dir/pdfs``."""
    rows = (data_dir / "data" / "financebench_open_source.jsonl").read_text().splitlines()
    picked: list[dict[str, Any]] = []
    for line in rows:
        row = json.loads(line)
        pdf = filing_path(data_dir, row["doc_name"])
        if pdf.exists() and all(p["doc_name"] != row["doc_name"] for p in picked):
            picked.append({**row, "pdf": pdf})
        if len(picked) == items:
            break
    return picked


def cost_bench(
    data_dir: str | Path | None = None,
    items: int = 3,
    local: Backend | str | None = None,
    remote: Backend | str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Run Minions on ``items`` FinanceBench questions (``data_dir``: a FinanceBench checkout, default
    ``$MINIONS_DATA/financebench``); count what RemoteOnly would have sent."""
    data = benchmark_data("financebench", data_dir, expected="a FinanceBench checkout with data/ and pdfs/")
    local_backend = resolve(local or default_local())
    protocol = Minions(local_backend, resolve(remote) if remote else None, **{**BENCH_OPTIONS, **options})
    rows, start = [], time.perf_counter()
    for item in financebench_items(data, items):
        doc = load_document(item["pdf"])
        t = time.perf_counter()
        result = protocol.run(item["question"], [doc])
        estimate = result.remote_only_estimate
        rows.append(
            {
                "question": item["question"],
                "doc_name": item["doc_name"],
                "pages": len(doc.pages),
                "expected": item["answer"],
                "answer": result.answer,
                "complete": result.complete,
                "notes": list(result.notes),
                "jobs": len(result.jobs),
                "remote_input_tokens_remote_only": estimate.prompt_tokens if estimate else 0,
                "remote_input_tokens_minions": result.usage["remote"].prompt_tokens,
                "seconds": round(time.perf_counter() - t, 1),
                "timings": {k: round(v, 1) for k, v in result.timings.items()},
            }
        )
        log.info("cost bench: %s done in %.0fs", item["doc_name"], rows[-1]["seconds"])
    remote_only = sum(r["remote_input_tokens_remote_only"] for r in rows)
    minions = sum(r["remote_input_tokens_minions"] for r in rows)
    return {
        "items": len(rows),
        "local": local_backend.name,
        "remote": protocol.remote.name,
        "remote_input_tokens_remote_only": remote_only,
        "remote_input_tokens_minions": minions,
        "ratio": round(remote_only / minions, 1) if minions else None,
        "seconds": round(time.perf_counter() - start, 1),
        "per_item": rows,
    }
