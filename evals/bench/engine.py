"""``minions bench engine``: Minions-style jobs one at a time, then through the batching engine, same model.

The job set: ``len(instructions)`` instructions x ``chunks`` excerpts of ``chunk_tokens`` tokens from a
FinanceBench filing, each job a JSON reply constrained to {explanation, citation, answer}, greedy. The
excerpt comes before the instruction (``order="chunk-first"``), as in the original Minions worker prompt, so
the jobs of one chunk share system prompt and excerpt; ``instruction-first`` shares only system prompt and
instruction across chunks.

Baseline (``baseline="highlevel"``): ``llama_cpp.Llama.create_chat_completion`` per job after ``reset()``,
exactly what ``LlamaCppBackend`` did before the engine. ``baseline="engine"``: the engine with one sequence and
no prefix sharing. Speculative decoding is off in both (``speculate``), so that the batched replies can be
compared with the baseline's token for token. Reported:

- ``sequential_s`` / ``batched_s`` and ``speedup``, measured in one process one after the other;
- ``decode_tok_s_*``: generated tokens per second of decoding (sequential: after each job's first token;
  batched: decode calls' time shared out by tokens, see ``BatchStats.decode_s``);
- ``identical_outputs``: jobs whose batched reply equals the sequential one token for token; the others are
  ``near_ties`` when, at the first differing token, the two candidates' logits (recomputed alone) are within
  ``tie_eps``, else ``mismatches``;
- ``peak_rss_mb``, and the process RSS and KV cells in use after each of ``repeats`` batched runs (no growth).
"""

from __future__ import annotations

import logging
import os
import re
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from minions.backends.llamacpp.defaults import DEFAULT_CONTEXT, DEFAULT_MAX_SEQS
from minions.backends.settings import cpu_threads
from minions.errors import ConfigError
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

from .options import option

if TYPE_CHECKING:  # the CLI reads BenchConfig's defaults without loading numpy and llama.cpp
    from minions.backends.llamacpp.engine import Engine
    from minions.backends.llamacpp.ffi import LlamaModel

__all__ = [
    "INSTRUCTIONS",
    "JOB_SCHEMA",
    "BaselineReply",
    "BenchConfig",
    "bench_jobs",
    "compare_replies",
    "engine_bench",
    "load_chunks",
    "one_at_a_time",
]

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "What were the company's total net sales for the year? Give the amount and its unit.",
    "Which risks or uncertainties does the excerpt mention?",
    "What does the excerpt say about cash flows, capital spending or dividends?",
)
SYSTEM = (
    "You read one excerpt of a document and follow an instruction about it. Reply with one JSON object only: "
    '{"explanation": "one short sentence", "citation": "a short exact quote from the excerpt, or null", '
    '"answer": "the answer, or null if the excerpt does not say"}'
)
JOB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "explanation": {"type": "string"},
        "citation": {"type": ["string", "null"]},
        "answer": {"type": ["string", "null"]},
    },
    "required": ["explanation", "citation", "answer"],
}


@dataclass(frozen=True, slots=True)
class BenchConfig:
    document: str = option("3M_2018_10K.pdf", "PDF in the data folder")
    first_page: int = 20
    """Excerpts start here (past the cover and the table of contents)."""
    chunks: int = option(8, "excerpts")
    chunk_tokens: int = 900
    instructions: tuple[str, ...] = INSTRUCTIONS
    max_tokens: int = option(128, "reply token limit per job")
    max_seqs: int = option(DEFAULT_MAX_SEQS, "jobs decoded together")
    order: Literal["chunk-first", "instruction-first"] = option("chunk-first", "where the instruction goes")
    baseline: Literal["highlevel", "engine"] = option(
        "highlevel", "the one-at-a-time baseline: llama-cpp-python's chat call, or the engine a job at a time"
    )
    n_ctx: int = DEFAULT_CONTEXT
    repeats: int = 2
    """Batched runs (the first is timed; all report memory, to show it does not grow)."""
    speculate: bool = False
    """Off: this benchmark measures batching (``minions bench speculative`` measures speculation)."""
    tie_eps: float = 0.05
    """Logit gap under which two tokens count as tied (batched and single-sequence arithmetic differ)."""


def load_chunks(pdf: Path, model: LlamaModel, config: BenchConfig) -> list[str]:
    """``config.chunks`` consecutive excerpts of ``config.chunk_tokens`` tokens from ``pdf``'s pages."""
    from pypdf import PdfReader

    reader = PdfReader(str(pdf))
    need = config.chunks * config.chunk_tokens
    text, tokens = "", []
    for page in reader.pages[config.first_page :]:
        # PDF tables come out as one cell per line; keep the words, drop the empty lines
        text += re.sub(r"[ \t]*\n[ \t\n]*", "\n", page.extract_text() or "")
        tokens = model.tokenize(text, special=False)
        if len(tokens) >= need:
            break
    if len(tokens) < need:
        raise ConfigError(f"{pdf.name} has too little text for {config.chunks} chunks of {config.chunk_tokens}.")
    size = config.chunk_tokens
    return [model.detokenize(tokens[i * size : (i + 1) * size]).decode("utf-8", "ignore") for i in range(config.chunks)]


def bench_jobs(chunks: Sequence[str], config: BenchConfig) -> list[ChatRequest]:
    """Every instruction over every chunk, ordered chunk by chunk (the order the jobs are submitted in)."""
    params = SamplingParams(max_tokens=config.max_tokens, json_schema=JOB_SCHEMA)
    jobs = []
    for k, chunk in enumerate(chunks):
        for instruction in config.instructions:
            excerpt = f"Excerpt (chunk {k + 1}):\n{chunk}"
            task = f"Instruction: {instruction}"
            body = f"{excerpt}\n\n{task}" if config.order == "chunk-first" else f"{task}\n\n{excerpt}"
            jobs.append(ChatRequest([Message("system", SYSTEM), Message("user", body)], params))
    return jobs


@dataclass(frozen=True, slots=True)
class BaselineReply:
    """A reply of the one-at-a-time baseline."""

    text: str
    tokens: list[int]
    """Sampled ids, the end-of-generation token included."""
    prefill_s: float
    decode_s: float


def one_at_a_time(
    model_path: str | os.PathLike[str], requests: Sequence[ChatRequest], *, n_ctx: int
) -> list[BaselineReply]:
    """Each job through ``Llama.create_chat_completion`` after ``reset()``, as the backend used to, greedy."""
    from minions.backends.llamacpp.ffi import import_llama_cpp

    llm = import_llama_cpp().Llama(
        model_path=str(model_path), n_ctx=n_ctx, n_threads=cpu_threads(), n_batch=512, verbose=False
    )
    sampled: list[tuple[float, int]] = []
    sample = llm.sample

    def traced(*args: Any, **kwargs: Any) -> int:  # records each token and when it came; changes nothing
        token = int(sample(*args, **kwargs))
        sampled.append((time.perf_counter(), token))
        return token

    llm.sample = traced
    replies = []
    for req in requests:
        schema = req.params.json_schema
        sampled.clear()
        llm.reset()
        start = time.perf_counter()
        out = llm.create_chat_completion(
            messages=[m.to_dict() for m in req.messages],
            temperature=0.0,
            max_tokens=req.params.max_tokens,
            seed=0,
            response_format={"type": "json_object", "schema": dict(schema)} if schema else None,
        )
        end = time.perf_counter()
        first = sampled[0][0] if sampled else end
        text = out["choices"][0]["message"]["content"] or ""
        replies.append(BaselineReply(text, [t for _, t in sampled], first - start, end - first))
    llm.close()
    return replies


def _sequential_engine(model_path: Path, requests: Sequence[ChatRequest], config: BenchConfig) -> list[BaselineReply]:
    """Each job alone through the engine: one sequence, no prefix sharing."""
    from minions.backends.llamacpp.engine import Engine, EngineConfig

    engine = Engine(model_path, EngineConfig(n_ctx=config.n_ctx, max_seqs=1, share_prefixes=False,
                                                speculate=config.speculate))  # fmt: skip
    replies = []
    for req in requests:
        r = engine.run([req], trace_tokens=True)[0]
        replies.append(BaselineReply(r.text, list(r.stats["token_ids"]), r.timings.prefill_s, r.timings.decode_s))
    engine.close()
    return replies


def divergence_report(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], logits_after: Callable[[int, int], Any], eps: float
) -> dict[str, Any]:
    """Compare reference and candidate token lists. Where they differ, the logit gap between the two tokens at
    the first difference (``logits_after(i, k)``: pair ``i``'s logits after its first ``k`` shared tokens) says
    whether it was a near-tie (under ``eps``: the last bits of batched arithmetic) or a real mismatch."""
    identical, gaps = 0, []
    for i, (ref, got) in enumerate(pairs):
        if list(ref) == list(got):
            identical += 1
            continue
        k = next((j for j, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), None)
        if k is None:  # one stopped (length) where the other went on: not a token choice
            gaps.append(float("inf"))
            continue
        logits = logits_after(i, k)
        gaps.append(abs(float(logits[ref[k]]) - float(logits[got[k]])))
    return {
        "identical_outputs": identical,
        "near_ties": sum(g < eps for g in gaps),
        "mismatches": sum(g >= eps for g in gaps),
        "divergence_gaps": [round(g, 5) for g in gaps],
    }


def compare_replies(
    engine: Engine, base: Sequence[BaselineReply], batched: Sequence[ChatResult], eps: float
) -> dict[str, Any]:
    """Identical replies (``batched`` ran with ``trace_tokens``); for the others, the gap recomputed alone."""
    pairs = [(ref.tokens, list(got.stats["token_ids"])) for ref, got in zip(base, batched, strict=True)]
    return divergence_report(
        pairs, lambda i, k: engine.logits_after([*batched[i].stats["prompt_ids"], *pairs[i][0][:k]]), eps
    )


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


JobMaker = Callable[[Sequence[str], "BenchConfig"], list[ChatRequest]]
"""Every instruction of a config over every chunk, as requests: the protocols' ``production_jobs`` (the job prompt
and schema production sends; the CLI passes it), or ``bench_jobs``, this module's own for the prompt-order
experiment (this layer cannot import the protocols' prompts)."""


def engine_bench(
    data: str | os.PathLike[str] | None, config: BenchConfig | None = None, make_jobs: JobMaker | None = None
) -> dict[str, Any]:
    """Run the benchmark; one flat dict (the CLI prints it as one JSON line)."""
    from minions.backends.llamacpp.engine import Engine, EngineConfig
    from minions.backends.llamacpp.ffi import LlamaModel
    from minions.backends.llamacpp.quantize import default_local_model

    from ..financebench import find_filing

    c = config or BenchConfig()
    pdf = find_filing(c.document, data)
    model_path = default_local_model()
    tokenizer = LlamaModel(model_path)
    requests = (make_jobs or bench_jobs)(load_chunks(pdf, tokenizer, c), c)
    tokenizer.close()
    load = os.getloadavg()[0]

    start = time.perf_counter()
    if c.baseline == "highlevel":
        base = one_at_a_time(model_path, requests, n_ctx=c.n_ctx)
    else:
        base = _sequential_engine(model_path, requests, c)
    sequential_s = time.perf_counter() - start
    peak_sequential = _peak_rss_mb()

    # made after the baseline is freed, so that peak_rss_mb is the larger of the two, not their sum
    # no prefix states saved to disk: this measures batching (``minions bench cache`` measures those)
    engine = Engine(model_path, EngineConfig(n_ctx=c.n_ctx, max_seqs=c.max_seqs, speculate=c.speculate, kv_cache=False))
    runs, memory = [], []
    for _ in range(max(1, c.repeats)):
        engine.clear_cache()  # every run starts cold: no prefixes kept from the one before
        start = time.perf_counter()
        results = engine.run(requests, trace_tokens=True)
        runs.append((time.perf_counter() - start, results))
        memory.append({"rss_mb": round(_rss_mb(), 1), "kv_cells": engine.stats.cells_used})
    batched_s, results = runs[0]
    batch = results[0].stats["batch"]
    generated = sum(r.usage.completion_tokens for r in results)
    base_generated = sum(len(r.tokens) - bool(r.tokens and engine.model.is_eog(r.tokens[-1])) for r in base)
    out = {
        "jobs": len(requests),
        "document": pdf.name,
        "order": c.order,
        "baseline": c.baseline,
        "max_seqs": c.max_seqs,
        "sequential_s": round(sequential_s, 2),
        "batched_s": round(batched_s, 2),
        "speedup": round(sequential_s / batched_s, 2),
        "decode_tok_s_sequential": round(base_generated / max(1e-9, sum(r.decode_s for r in base)), 1),
        "decode_tok_s_batched": round(generated / max(1e-9, batch["decode_s"]), 1),
        "prompt_tokens": sum(r.usage.prompt_tokens for r in results),
        "prefill_tokens_computed": batch["prefill_computed"],
        "prefill_tokens_saved": batch["prefill_reused"],
        "generated_tokens": generated,
        "decode_calls": batch["decode_calls"],
        "batched_prefill_s": round(batch["prefill_s"], 2),
        "batched_decode_s": round(batch["decode_s"], 2),
        "stream_copies": batch["stream_copies"],
        **compare_replies(engine, base, results, c.tie_eps),
        "batched_repeat_s": [round(s, 2) for s, _ in runs[1:]],
        "memory_after_each_run": memory,
        "peak_rss_mb": _peak_rss_mb(),
        "peak_rss_mb_after_sequential": peak_sequential,
        "kv_mb_batched": round(engine.kv_bytes / 2**20, 1),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }
    engine.close()
    return out
