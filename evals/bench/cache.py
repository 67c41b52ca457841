"""``minions bench cache``: the same questions about one document asked twice, cold then warm, by the local
protocol on the embedded model, with saved chunk prefixes (``backends.llamacpp.prefixes``) in a fresh folder.

Cold: nothing saved; each chunk the jobs read is computed and its "system prompt + chunk" state saved. Warm: a
new engine (nothing in memory) asks the same questions; the chunks' states come from disk. Printed: the local
time of each run and their ratio, whether every reply (each job's reply and score, and the answer) is the same,
the prompt tokens computed and restored, the disk the states take, and the engine's load time.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.llamacpp.engine import EngineConfig
from minions.backends.llamacpp.kvstore import KVStore
from minions.documents import load_document
from minions.errors import ConfigError
from minions.protocols.factory import get_protocol

from .options import option

__all__ = ["DEFAULT_QUESTIONS", "CacheBenchConfig", "cache_bench"]

DEFAULT_QUESTIONS: tuple[str, ...] = (
    "What is the FY2018 capital expenditure amount (in USD millions)?",
    "What was total net sales in 2018?",
    "What was the dividend per share paid in 2018?",
    "How many employees did the company have at year end?",
    "What was the effective tax rate in 2018?",
)
"""Questions a reader asks of an annual report (the first is FinanceBench's about the 3M 2018 10-K)."""


@dataclass(frozen=True)
class CacheBenchConfig:
    document: str = option("", "the document (e.g. FinanceBench's pdfs/3M_2018_10K.pdf)", required=True)
    """The document asked about (a FinanceBench filing: ``--data``'s pdfs/3M_2018_10K.pdf)."""
    questions: tuple[str, ...] = option(
        DEFAULT_QUESTIONS, "a question", flag="--question", repeat=True, shown="five about a 10-K"
    )
    chunk_size: int | None = option(None, "characters per chunk", shown="the protocols' default")
    """Characters per chunk; None: the protocol's default."""
    max_seqs: int = option(8, "jobs in flight in the engine")


def _run(config: CacheBenchConfig, kv_dir: Path, phase: str) -> tuple[dict[str, Any], list[Any]]:
    start = time.perf_counter()
    backend = LlamaCppBackend(engine_config=EngineConfig(max_seqs=config.max_seqs, kv_cache_dir=str(kv_dir)))
    engine = backend.engine
    load_s = time.perf_counter() - start
    # the model reads every chunk, cold and warm: the same jobs, computed against restored (no read_tokens limit)
    options: dict[str, Any] = {"read_tokens": None, **({"chunk_size": config.chunk_size} if config.chunk_size else {})}
    protocol = get_protocol("local", backend, None, **options)
    doc = load_document(config.document)
    replies, local_s, started = [], 0.0, time.perf_counter()
    try:
        for question in config.questions:
            result = protocol.run(question, [doc])
            local_s += float(result.timings.get("local_s", 0.0))
            replies.append((result.answer, [(j.chunk, j.raw, j.score) for j in result.jobs]))
        stats = engine.stats
    finally:
        backend.close()
    line = {
        "phase": phase,
        "questions": len(config.questions),
        "seconds": round(time.perf_counter() - started, 2),
        "local_s": round(local_s, 2),
        "load_s": round(load_s, 2),
        "prefill_computed": stats.prefill_computed,
        "prefill_restored": stats.prefill_restored,
        "prefill_reused_in_memory": stats.prefill_reused - stats.prefill_restored,
        "jobs": stats.jobs,
    }
    return line, replies


def cache_bench(config: CacheBenchConfig, kv_dir: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield the cold run's line, the warm run's, then the summary. ``kv_dir``: where the states go (default: a
    temporary folder, removed after)."""
    if not config.document or not Path(config.document).is_file():
        raise ConfigError(f"No document at {config.document!r}: pass --document PATH (a 10-K PDF, say).")
    with tempfile.TemporaryDirectory(prefix="minions-kv-bench-") as tmp:
        folder = Path(kv_dir) if kv_dir else Path(tmp)
        KVStore(folder).clear()
        load_before = os.getloadavg()[0]
        cold, cold_replies = _run(config, folder, "cold")
        yield cold
        usage = KVStore(folder).usage()
        warm, warm_replies = _run(config, folder, "warm")
        yield warm
        yield {
            "summary": True,
            "document": Path(config.document).name,
            "warm_over_cold_local": round(warm["local_s"] / cold["local_s"], 3) if cold["local_s"] else None,
            "warm_over_cold_total": round(warm["seconds"] / cold["seconds"], 3) if cold["seconds"] else None,
            "identical_replies": cold_replies == warm_replies,
            "prefill_computed": {"cold": cold["prefill_computed"], "warm": warm["prefill_computed"]},
            "prefill_restored_warm": warm["prefill_restored"],
            "saved_prefixes": usage.entries,
            "disk_mb": round(usage.bytes / 1e6, 1),
            "disk_kb_per_token": round(usage.bytes / usage.tokens / 1e3, 1) if usage.tokens else None,
            "load_s": {"cold": cold["load_s"], "warm": warm["load_s"]},
            "loadavg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
