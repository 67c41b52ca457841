"""``minions bench fleet``: the same local jobs on one server, then on the whole fleet; throughput ratio.

The jobs are the ones the local side runs in production (``protocols.evidence.jobs.job_messages``: a chunk of the
document, an instruction, the quote asked for), over chunks of ``document``, greedy, ``max_tokens`` each. Each
pair runs the jobs on the fleet's first server alone and on every server (in alternating order, after one
warm-up batch on each server), and the summary gives the median ratio of jobs per second with the load average
around the runs: on a shared machine the servers compete with everything else for the same cores.

``cold_warm`` (``--cold-warm``) times instead the scored jobs the local side runs where the model reports
log-probabilities (``protocols.evidence.jobs.scored_request``) on the embedded engine, on the fleet's first server
alone and on the whole fleet: a question over ``jobs`` chunks that setting has not read (cold), then another question
over the same chunks (warm: the chunk comes first in the prompt, so an engine or server that keeps it computes only the
question). The document's chunks are cut into one slice per setting and the settings take the slices in turn,
one round each, so over three rounds every setting runs the same jobs; the summary gives each setting's seconds
cold and warm over all rounds, warm over cold, and each over the embedded engine's. The embedded engine keeps its
chunk states in a folder of the bench's own (it starts with none, as a server does).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minions.backends.base import Backend
from minions.backends.fleet import FleetBackend
from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.llamacpp.engine import EngineConfig
from minions.backends.registry import resolve
from minions.chunking import DEFAULT_CHUNK_SIZE, Chunk, chunk_document
from minions.documents import load_document
from minions.errors import ConfigError
from minions.protocols.evidence.jobs import job_messages, scored_request
from minions.types import ChatRequest, SamplingParams

from .options import option

__all__ = ["FleetBenchConfig", "fleet_bench"]

INSTRUCTION = "What was total revenue, and how did it change from the year before?"
WARM_INSTRUCTION = "What was net income, and what were the main costs?"
"""The second question over the same chunks (cold/warm)."""


@dataclass(frozen=True, slots=True)
class FleetBenchConfig:
    local: str = option("", "openai-compatible/<model>@<url>,<url>,... (two or more)", required=True)
    document: str = option("examples/northwind-annual-report-2025.md", "the document the jobs read")
    jobs: int = option(16, "jobs per run")
    chunk_chars: int = DEFAULT_CHUNK_SIZE
    max_tokens: int = option(32, "reply token limit per job")
    pairs: int = option(3, "timed pairs, one server then the fleet")
    per_server: int = option(2, "requests in flight per server")
    cold_warm: bool = option(
        False, "the embedded engine, one server and the fleet: a question over unread chunks, then another"
    )
    """Time the embedded engine, one server and the fleet, cold then warm, instead (the module's docstring)."""
    rounds: int = option(3, "--cold-warm rounds, each setting on another slice")
    """Cold/warm rounds: with 3, every setting reads every slice once; fewer, each setting reads its own."""


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


def _fleet(config: FleetBenchConfig) -> FleetBackend:
    fleet = resolve(config.local)
    if not isinstance(fleet, FleetBackend) or len(fleet.servers) < 2:
        raise ConfigError(
            f"bench fleet needs two servers or more: --local openai-compatible/<model>@<url>,<url>, "
            f"got {config.local!r}."
        )
    if not Path(config.document).is_file():
        raise ConfigError(f"No document {config.document!r}: pass --document FILE.")
    return FleetBackend(fleet.model, fleet.base_urls, per_server=config.per_server)


def fleet_bench(config: FleetBenchConfig) -> Iterator[dict[str, Any]]:
    """One line per timed run, then the summary."""
    fleet = _fleet(config)
    if config.cold_warm:
        yield from _cold_warm(fleet, config)
        return
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


def _slices(config: FleetBenchConfig, settings: int) -> list[list[Chunk]]:
    """``settings`` slices of ``config.jobs`` chunks each, none shared."""
    chunks = chunk_document(load_document(config.document), size=config.chunk_chars)
    if len(chunks) < settings * config.jobs:
        raise ConfigError(
            f"--cold-warm reads {settings} x {config.jobs} chunks no setting has read, and {config.document} has "
            f"{len(chunks)}: pass a longer --document (a 10-K filing) or fewer --jobs."
        )
    return [chunks[k * config.jobs : (k + 1) * config.jobs] for k in range(settings)]


def _cold_then_warm(backend: Backend, chunks: Sequence[Chunk]) -> dict[str, Any]:
    """Seconds of the first question over ``chunks``, then of the second; the prompt tokens each reused, where the
    backend says (the embedded engine does; llama-cpp-python's server does not); the jobs that failed or came back
    without log-probabilities."""
    line: dict[str, Any] = {"failed": 0}
    for phase, instruction in (("cold", INSTRUCTION), ("warm", WARM_INSTRUCTION)):
        start = time.perf_counter()
        results = backend.batch([scored_request(instruction, c) for c in chunks])
        line[f"{phase}_s"] = round(time.perf_counter() - start, 3)
        line[f"{phase}_reused_tokens"] = sum(r.usage.cached_prompt_tokens for r in results)
        line["failed"] += sum(not r.ok or "logprobs" not in r.stats for r in results)
    return line


def _cold_warm(fleet: FleetBackend, config: FleetBenchConfig) -> Iterator[dict[str, Any]]:
    """One line per round and setting, then the summary (the module's docstring)."""
    single = FleetBackend(fleet.model, fleet.base_urls[:1], per_server=config.per_server)
    with tempfile.TemporaryDirectory(prefix="minions-kv-bench-") as kv:
        embedded = LlamaCppBackend(engine_config=EngineConfig(kv_cache_dir=kv))
        settings: list[tuple[str, Backend]] = [("embedded", embedded), ("one server", single), ("fleet", fleet)]
        slices = _slices(config, len(settings))
        load_before = os.getloadavg()
        keys = ("cold_s", "warm_s", "cold_reused_tokens", "warm_reused_tokens", "failed")
        totals = {name: dict.fromkeys(keys, 0.0) for name, _ in settings}
        try:
            for round_ in range(min(config.rounds, len(settings))):
                for s, (name, backend) in enumerate(settings):
                    part = (s + round_) % len(slices)
                    line = _cold_then_warm(backend, slices[part])
                    for key in totals[name]:
                        totals[name][key] += line[key]
                    yield {"round": round_, "setting": name, "slice": part, "jobs": config.jobs, **line}
        finally:
            embedded.close()
    base = totals["embedded"]
    yield {
        "summary": True,
        "servers": len(fleet.servers),
        "jobs": config.jobs * len(settings),
        **{
            name: {
                **{k: round(v, 2) if k.endswith("_s") else int(v) for k, v in t.items()},
                "warm_over_cold": round(t["warm_s"] / t["cold_s"], 3),
                "cold_over_embedded": round(t["cold_s"] / base["cold_s"], 3),
                "warm_over_embedded": round(t["warm_s"] / base["warm_s"], 3),
            }
            for name, t in totals.items()
        },
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
