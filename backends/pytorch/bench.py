"""``minions bench tree``: plain vs chain vs tree speculation in the PyTorch backend, same process, same jobs.

The jobs are ``bench engine``'s extraction jobs (Minions-style JSON replies over FinanceBench excerpts, greedy,
the production prompt and schema, imported from the llama.cpp bench), run one after another through one loaded
``TransformersBackend``. Each repeat runs plain, chain and tree in turn (a load burst hits all three), each
with fresh acceptance counts that learn only from its own run; T(n) is measured once, before the first run.
One JSON line:

- ``plain_ms_per_token`` / ``chain_ms_per_token`` / ``tree_ms_per_token``: decode milliseconds per generated
  token (drafting, verify calls, grammar masks and sampling included; prefill excluded), the median pair's;
- ``tree_vs_plain``, ``tree_vs_chain``, ``chain_vs_plain``: speedups of the median repeat (by tree vs plain),
  every repeat's in ``speedups``;
- ``llamacpp_plain_ms_per_token``: llama.cpp's plain decode of the same GGUF and jobs, one job at a time, in
  the same process after the PyTorch runs, so the ratio above is not read as an absolute speed;
- ``identical_outputs``: jobs whose chain and tree token ids equal plain decoding's (greedy is lossless: any
  other count is a bug or a float near-tie, reported as ``mismatches``);
- ``acceptance``, ``tokens_per_step``, ``mean_tree_size`` per mode, ``cost_ratios`` (the measured ``T(n)/T(1)``
  the tree shapes were chosen with) and ``acceptance_by_depth`` (tree mode's learned ``p[depth][rank]``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from minions.types import ChatRequest, ChatResult

from .backend import TransformersBackend
from .decode import Mode, SpecConfig, Speculation, measure_cost

__all__ = ["TreeBenchConfig", "tree_bench"]

MODES: tuple[Mode, ...] = ("plain", "chain", "tree")


@dataclass(frozen=True, slots=True)
class TreeBenchConfig:
    document: str = "3M_2018_10K.pdf"
    chunks: int = 2
    chunk_tokens: int = 400
    jobs_per_chunk: int = 2
    max_tokens: int = 96
    repeats: int = 3
    """Plain, chain and tree runs per repeat, in turn; the line reports the median repeat (by tree vs plain)."""
    n_threads: int | None = None
    """torch's CPU threads; None: its default (all cores). On a machine shared with other work, 1 avoids threads
    waiting on each other (2 threads under load were 10x slower than 1 here)."""
    max_nodes: int = 48
    llamacpp: bool = True
    """Also time llama.cpp's plain decode of the same GGUF and jobs."""


class _Tokens:
    """The PyTorch tokenizer in the shape ``load_chunks`` reads (``tokenize`` and ``detokenize``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=special))

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return str(self.tokenizer.decode(list(tokens))).encode()


def _jobs(data: str | os.PathLike[str] | None, backend: TransformersBackend, c: TreeBenchConfig) -> list[ChatRequest]:
    from ..llamacpp.bench import INSTRUCTIONS, BenchConfig, bench_jobs, find_document, load_chunks

    config = BenchConfig(chunks=c.chunks, chunk_tokens=c.chunk_tokens, max_tokens=c.max_tokens,
                         instructions=INSTRUCTIONS[: c.jobs_per_chunk])  # fmt: skip
    chunks = load_chunks(find_document(data, c.document), _Tokens(backend.tokenizer), config)  # type: ignore[arg-type]
    return bench_jobs(chunks, config)


def _run(backend: TransformersBackend, jobs: Sequence[ChatRequest], spec: Speculation) -> list[ChatResult]:
    return [backend.complete(list(job.messages), job.params, speculation=spec) for job in jobs]


def _ms_per_token(results: Sequence[ChatResult]) -> float:
    tokens = sum(r.usage.completion_tokens for r in results)
    return 1000 * sum(r.timings.decode_s for r in results) / max(1, tokens)


def _summary(results: Sequence[ChatResult]) -> dict[str, Any]:
    drafted = sum(r.stats["drafted"] for r in results)
    accepted = sum(r.stats["accepted"] for r in results)
    steps = sum(r.stats["verify_steps"] for r in results)
    tokens = sum(r.usage.completion_tokens for r in results)
    return {
        "acceptance": round(accepted / drafted, 3) if drafted else None,
        "tokens_per_step": round(tokens / max(1, steps), 3),
        "mean_tree_size": round(sum(r.stats["verified_tokens"] for r in results) / max(1, steps), 2),
    }


def _llamacpp_ms_per_token(jobs: Sequence[ChatRequest], n_threads: int | None) -> float:
    from ..llamacpp.engine import Engine, EngineConfig
    from ..models import smollm2_path

    engine = Engine(smollm2_path(), EngineConfig(max_seqs=1, n_threads=n_threads, speculate=False, kv_cache=False))
    try:
        results = engine.run(jobs, speculate=False, max_active=1)
    finally:
        engine.close()
    b = results[0].stats["batch"]
    return 1000 * float(b["decode_s"]) / max(1, int(b["decode_tokens"]))


def tree_bench(data: str | os.PathLike[str] | None, config: TreeBenchConfig | None = None) -> list[dict[str, Any]]:
    """One flat dict (the CLI prints it as a JSON line)."""
    import torch

    c = config or TreeBenchConfig()
    if c.n_threads is not None:
        torch.set_num_threads(c.n_threads)
    start = time.perf_counter()
    backend = TransformersBackend()
    jobs = _jobs(data, backend, c)
    load = os.getloadavg()[0]
    cost = measure_cost(backend.model, backend.new_cache)
    runs = []
    for _ in range(max(1, c.repeats)):
        specs = {mode: Speculation(SpecConfig(mode=mode, max_nodes=c.max_nodes), cost) for mode in MODES}
        results = {mode: _run(backend, jobs, specs[mode]) for mode in MODES}
        ms = {mode: _ms_per_token(results[mode]) for mode in MODES}
        runs.append((ms, results, specs))
    runs.sort(key=lambda run: run[0]["plain"] / run[0]["tree"])
    ms, results, specs = runs[len(runs) // 2]
    plain_ids = [r.stats["token_ids"] for r in results["plain"]]
    same = {mode: sum(r.stats["token_ids"] == ids for r, ids in zip(results[mode], plain_ids, strict=True))
            for mode in ("chain", "tree")}  # fmt: skip
    line: dict[str, Any] = {
        "setting": "extraction",
        "model": backend.name,
        "jobs": len(jobs),
        "generated_tokens": sum(r.usage.completion_tokens for r in results["plain"]),
        **{f"{mode}_ms_per_token": round(ms[mode], 1) for mode in MODES},
        "tree_vs_plain": round(ms["plain"] / ms["tree"], 3),
        "tree_vs_chain": round(ms["chain"] / ms["tree"], 3),
        "chain_vs_plain": round(ms["plain"] / ms["chain"], 3),
        "speedups": [
            {"tree_vs_plain": round(m["plain"] / m["tree"], 3), "tree_vs_chain": round(m["chain"] / m["tree"], 3)}
            for m, _, _ in runs
        ],
        "identical_outputs": same,
        "mismatches": {mode: len(jobs) - n for mode, n in same.items()},
        **{mode: _summary(results[mode]) for mode in ("chain", "tree")},
        "acceptance_by_depth": specs["tree"].acceptance.table(),
        "cost_ratios": cost.ratios(),
        "t1_ms": round(1000 * cost(1), 1),
        "n_threads": torch.get_num_threads(),
    }
    if c.llamacpp:
        line["llamacpp_plain_ms_per_token"] = round(_llamacpp_ms_per_token(jobs, c.n_threads), 1)
    line.update(load_before=round(load, 2), load_after=round(os.getloadavg()[0], 2),
                seconds=round(time.perf_counter() - start, 1))  # fmt: skip
    return [line]
