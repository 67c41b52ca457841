"""``minions bench fleet``: the same local jobs on one server, then on the whole fleet; throughput ratio.

The jobs are the ones the local side runs in production (``protocols.jobs.job_messages``: a chunk of the
document, an instruction, the quote asked for), over chunks of ``document``, greedy, ``max_tokens`` each. Each
pair runs the jobs on the fleet's first server alone and on every server (in alternating order, after one
warm-up batch on each server), and the summary gives the median ratio of jobs per second with the load average
around the runs: on a shared machine the servers compete with everything else for the same cores.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minions.backends.fleet import FleetBackend
from minions.backends.registry import resolve
from minions.chunking import DEFAULT_CHUNK_SIZE, chunk_document
from minions.documents import load_document
from minions.errors import ConfigError
from minions.types import ChatRequest, SamplingParams

from .jobs import job_messages

__all__ = ["FleetBenchConfig", "fleet_bench"]

INSTRUCTION = "What was total revenue, and how did it change from the year before?"


@dataclass(frozen=True, slots=True)
class FleetBenchConfig:
    local: str = ""
    """``openai-compatible/<model>@<url>,<url>,...``"""
    document: str = "examples/northwind-annual-report-2025.md"
    jobs: int = 16
    chunk_chars: int = DEFAULT_CHUNK_SIZE
    max_tokens: int = 32
    pairs: int = 3
    per_server: int = 2


def _jobs(config: FleetBenchConfig) -> list[ChatRequest]:
    chunks = chunk_document(load_document(config.document), size=config.chunk_chars)
    params = SamplingParams(max_tokens=config.max_tokens, temperature=0.0)
    return [
        ChatRequest(job_messages(INSTRUCTION, chunks[i % len(chunks)]), params.with_(seed=i))
        for i in range(config.jobs)
    ]


def _timed(backend: FleetBackend, jobs: list[ChatRequest]) -> dict[str, Any]:
    start = time.perf_counter()
    results = backend.batch(jobs)
    seconds = time.perf_counter() - start
    failed = sum(r.finish_reason == "error" for r in results)
    return {"seconds": round(seconds, 3), "jobs_per_s": round(len(jobs) / seconds, 3), "failed": failed}


def fleet_bench(config: FleetBenchConfig) -> Iterator[dict[str, Any]]:
    """One line per timed run, then the summary."""
    fleet = resolve(config.local)
    if not isinstance(fleet, FleetBackend) or len(fleet.servers) < 2:
        raise ConfigError(
            f"bench fleet needs two servers or more: --local openai-compatible/<model>@<url>,<url>, "
            f"got {config.local!r}."
        )
    if not Path(config.document).is_file():
        raise ConfigError(f"No document {config.document!r}: pass --document FILE.")
    fleet = FleetBackend(fleet.model, fleet.base_urls, per_server=config.per_server)
    single = FleetBackend(fleet.model, fleet.base_urls[:1], per_server=config.per_server)
    jobs = _jobs(config)
    for server in fleet.base_urls:  # warm-up: each server loads and caches its prompt prefix once
        FleetBackend(fleet.model, [server], per_server=config.per_server).batch(jobs[: config.per_server])
    load_before = os.getloadavg()
    ratios = []
    for pair in range(config.pairs):
        order = [("one server", single), ("fleet", fleet)]
        runs = {}
        for name, backend in order if pair % 2 == 0 else order[::-1]:
            runs[name] = _timed(backend, jobs)
            yield {"pair": pair, "setting": name, "servers": len(backend.servers), **runs[name]}
        ratios.append(runs["fleet"]["jobs_per_s"] / runs["one server"]["jobs_per_s"])
    yield {
        "summary": True,
        "servers": len(fleet.servers),
        "jobs": config.jobs,
        "max_tokens": config.max_tokens,
        "per_server": config.per_server,
        "throughput_ratio_median": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
