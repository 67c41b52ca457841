"""``minions bench tree``: plain vs chain vs tree speculation in the PyTorch backend, same process, same jobs.

The jobs are ``bench engine``'s extraction jobs (Minions-style JSON replies over FinanceBench excerpts, greedy,
the production prompt and schema, imported from the llama.cpp bench), run one after another through one loaded
``TransformersBackend``. Each repeat runs every mode in turn (a load burst hits them all), each with fresh
acceptance counts that learn only from its own run; T(n) is measured once, before the first run. The modes:
``plain``; ``chain`` and ``tree`` drafting from the job's own text; ``draft_chain`` and ``draft_tree`` drafting
with the backend's draft model (llama.cpp running the same GGUF; absent without one); ``batched``, the jobs
decoded together, ``max_batch`` rows per forward pass, plainly. One JSON line:

- ``<mode>_ms_per_token``: decode milliseconds per generated token (drafting, verify calls, grammar masks and
  sampling included; prefill excluded), the median repeat's; ``<mode>_prefill_s``: prefill seconds per job (the
  draft model's prefill included: it is the price of its drafts);
- ``<mode>_vs_plain`` for every speculative mode, ``tree_vs_chain`` (the text's drafts), ``draft_tree_vs_chain``
  (the draft model's tree against the text's chain) and ``draft_tree_vs_draft_chain``, of the median repeat (by
  the best tree against plain), every repeat's in ``speedups``;
- ``llamacpp_plain_ms_per_token``: llama.cpp's plain decode of the same GGUF and jobs, one job at a time, in
  the same process after the PyTorch runs, so the ratio above is not read as an absolute speed;
- ``identical_outputs``: jobs whose token ids equal plain decoding's, per mode (greedy is lossless); the others
  are ``near_ties`` when, at the first differing token, the two tokens' logits after the same text (one forward
  over it) are within ``TIE_EPS`` (a forward over many tokens adds in another order than one over one token),
  else ``mismatches`` (a bug);
- ``acceptance``, ``tokens_per_step``, ``mean_tree_size`` per mode, ``cost_ratios`` (the measured ``T(n)/T(1)``
  the tree shapes were chosen with), ``acceptance_by_depth`` (tree mode's learned ``p[depth][rank]``) and
  ``draft_calibration`` (the draft tree's measured chance of a node by its rank and draft probability).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minions.types import ChatRequest, ChatResult

from .options import option

if TYPE_CHECKING:  # torch loads when the bench runs, not when the CLI reads TreeBenchConfig's defaults
    from minions.backends.pytorch.backend import TransformersBackend
    from minions.backends.pytorch.decode import Mode, Speculation

__all__ = ["TreeBenchConfig", "tree_bench"]

RUNS: dict[str, tuple[Mode, bool]] = {
    "plain": ("plain", False),
    "chain": ("chain", False),
    "tree": ("tree", False),
    "draft_chain": ("chain", True),
    "draft_tree": ("tree", True),
    "batched": ("plain", False),
}
"""Each run's speculation mode, and whether it drafts with the draft model; ``batched`` decodes the jobs
together, ``max_batch`` at a time (``TransformersBackend.batch``'s batched path)."""
TIE_EPS = 0.05
"""Logit gap under which two tokens count as tied."""


@dataclass(frozen=True, slots=True)
class TreeBenchConfig:
    document: str = option("3M_2018_10K.pdf", "PDF in the data folder")
    chunks: int = option(2, "excerpts, {jobs_per_chunk} jobs each")
    chunk_tokens: int = 400
    jobs_per_chunk: int = 2
    max_tokens: int = option(96, "reply token limit per job")
    repeats: int = option(3, "runs of every mode in turn")
    """Plain, chain and tree runs per repeat, in turn; the line reports the median repeat (by tree vs plain)."""
    n_threads: int | None = option(None, "torch CPU threads", shown="all cores")
    """torch's CPU threads; None: its default (all cores). On a machine shared with other work, 1 avoids threads
    waiting on each other (2 threads under load were 10x slower than 1 here)."""
    max_nodes: int = 48
    llamacpp: bool = option(True, "skip llama.cpp's plain decode beside it", flag="--no-llamacpp")
    """Also time llama.cpp's plain decode of the same GGUF and jobs."""
    draft: bool = option(True, "skip the draft model's chain and tree", flag="--no-draft")
    """Also run the draft model's chain and tree (when llama.cpp is installed)."""
    batched: bool = option(True, "skip decoding the jobs together", flag="--no-batched")
    """Also decode the jobs together, ``max_batch`` at a time, plainly."""
    target: str | None = option(
        None,
        "the model to measure: 'deep' (SmolLM2 widened to a ~1B model's cost, built once) or a GGUF",
        metavar="deep|PATH",
        shown="the shipped SmolLM2",
    )
    """The model to measure: ``deep`` (SmolLM2 widened to a ~1B model's cost per token, ``llamacpp.deep``, built
    once) or a GGUF; None: the shipped SmolLM2."""
    draft_model: str | None = option(
        None, "with --target: the draft model's GGUF", flag="--draft", metavar="PATH", shown="SmolLM2"
    )
    """With ``target``: the draft model's GGUF (default: the engine's SmolLM2, as ``bench speculative
    --target``); without, the target's own GGUF."""


class _Tokens:
    """The PyTorch tokenizer in the shape ``load_chunks`` reads (``tokenize`` and ``detokenize``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=special))

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return str(self.tokenizer.decode(list(tokens))).encode()


def _jobs(data: str | os.PathLike[str] | None, backend: TransformersBackend, c: TreeBenchConfig) -> list[ChatRequest]:
    from ..financebench import find_filing
    from .engine import INSTRUCTIONS, BenchConfig, bench_jobs, load_chunks

    config = BenchConfig(chunks=c.chunks, chunk_tokens=c.chunk_tokens, max_tokens=c.max_tokens,
                         instructions=INSTRUCTIONS[: c.jobs_per_chunk])  # fmt: skip
    chunks = load_chunks(find_filing(c.document, data), _Tokens(backend.tokenizer), config)  # type: ignore[arg-type]
    return bench_jobs(chunks, config)


def _run(
    backend: TransformersBackend, jobs: Sequence[ChatRequest], spec: Speculation, *, batched: bool = False
) -> list[ChatResult]:
    if batched:
        size = backend.max_batch
        return [r for i in range(0, len(jobs), size) for r in backend._batch(jobs[i : i + size])]
    return [backend.complete(list(job.messages), job.params, speculation=spec) for job in jobs]


def _near_ties(backend: TransformersBackend, plain: Sequence[ChatResult], other: Sequence[ChatResult]) -> int:
    """Jobs whose reply differs from plain decoding's first where the two chosen tokens' logits are within
    ``TIE_EPS``."""
    import torch

    ties = 0
    for a, b in zip(plain, other, strict=True):
        x, y = a.stats["token_ids"], b.stats["token_ids"]
        k = next((i for i, (s, t) in enumerate(zip(x, y, strict=False)) if s != t), None)
        if k is None:
            continue
        with torch.inference_mode():
            ids = torch.tensor([[*a.stats["prompt_ids"], *x[:k]]], device=backend.model.device)
            logits = backend.model(input_ids=ids).logits[0, -1].float()
        ties += abs(float(logits[x[k]] - logits[y[k]])) <= TIE_EPS
    return ties


def _prefill_s(results: Sequence[ChatResult]) -> float:
    return sum(r.timings.prefill_s for r in results) / max(1, len(results))


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


def _llamacpp_ms_per_token(jobs: Sequence[ChatRequest], n_threads: int | None, model: Path | None) -> float:
    from minions.backends.llamacpp.engine import Engine, EngineConfig
    from minions.backends.model_files import smollm2_path

    path = model or smollm2_path()
    engine = Engine(path, EngineConfig(max_seqs=1, n_threads=n_threads, speculate=False, kv_cache=False))
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
    from minions.backends.pytorch.backend import TransformersBackend
    from minions.backends.pytorch.decode import SpecConfig, Speculation, measure_cost

    target = draft = None
    if c.target is not None:
        from .deep import resolve_pair

        target, draft = resolve_pair(c.target, c.draft_model)
    backend = TransformersBackend(model=target, draft_model=(draft or "auto") if c.draft else None)
    names = [name for name, (_, draft) in RUNS.items()
             if (not draft or backend.draft_model is not None) and (c.batched or name != "batched")]  # fmt: skip
    best = "draft_tree" if "draft_tree" in names else "tree"
    jobs = _jobs(data, backend, c)
    load = os.getloadavg()[0]
    cost = measure_cost(backend.model, backend.new_cache)
    runs = []
    for _ in range(max(1, c.repeats)):
        specs = {name: Speculation(SpecConfig(mode=RUNS[name][0], max_nodes=c.max_nodes, draft=RUNS[name][1]), cost)
                 for name in names}  # fmt: skip
        results = {name: _run(backend, jobs, specs[name], batched=name == "batched") for name in names}
        ms = {name: _ms_per_token(results[name]) for name in names}
        runs.append((ms, results, specs))
    runs.sort(key=lambda run: run[0]["plain"] / run[0][best])
    ms, results, specs = runs[len(runs) // 2]
    plain_ids = [r.stats["token_ids"] for r in results["plain"]]
    same = {name: sum(r.stats["token_ids"] == ids for r, ids in zip(results[name], plain_ids, strict=True))
            for name in names[1:]}  # fmt: skip
    ties = {name: _near_ties(backend, results["plain"], results[name]) for name in names[1:]}
    pairs = [(a, b) for a, b in (("tree", "chain"), ("draft_tree", "chain"), ("draft_tree", "draft_chain"))
             if a in names and b in names]  # fmt: skip

    def speedups(m: dict[str, float]) -> dict[str, float]:
        return {**{f"{name}_vs_plain": round(m["plain"] / m[name], 3) for name in names[1:]},
                **{f"{a}_vs_{b}": round(m[b] / m[a], 3) for a, b in pairs}}  # fmt: skip

    line: dict[str, Any] = {
        "setting": "extraction",
        "model": backend.name,
        "draft_model": str(backend.draft_model) if backend.draft_model is not None else None,
        "jobs": len(jobs),
        "generated_tokens": sum(r.usage.completion_tokens for r in results["plain"]),
        **{f"{name}_ms_per_token": round(ms[name], 1) for name in names},
        **{f"{name}_prefill_s": round(_prefill_s(results[name]), 2) for name in names},
        **speedups(ms),
        "speedups": [speedups(m) for m, _, _ in runs],
        "identical_outputs": same,
        "near_ties": ties,
        "mismatches": {name: len(jobs) - n - ties[name] for name, n in same.items()},
        **{name: _summary(results[name]) for name in names[1:]},
        "acceptance_by_depth": specs["tree"].acceptance.table(),
        "cost_ratios": cost.ratios(),
        "t1_ms": round(1000 * cost(1), 1),
        "n_threads": torch.get_num_threads(),
    }
    if "draft_tree" in names:
        line["draft_calibration"] = specs["draft_tree"].calibration.table()
    if c.llamacpp:
        line["llamacpp_plain_ms_per_token"] = round(_llamacpp_ms_per_token(jobs, c.n_threads, target), 1)
    line.update(load_before=round(load, 2), load_after=round(os.getloadavg()[0], 2),
                seconds=round(time.perf_counter() - start, 1))  # fmt: skip
    return [line]
