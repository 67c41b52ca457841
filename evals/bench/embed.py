"""``minions bench embed``: the library's meaning vectors made by each way this machine can run the embedding model,
side by side on the same chunks in one process, against sentence-transformers on PyTorch in float32 (the baseline).

The chunks are a library's (``protocols.search.meaning``: each with its header), drawn evenly from the first
``files`` FinanceBench filings. Each way is timed in pairs with the baseline, one right after the other on the same
chunks, so that a neighbour's load on a shared machine falls on both; printed per way: chunks a second (median of
the pairs), the median of the pairs' ratios to the baseline, and how close its vectors are to the baseline's (the
cosine of each chunk's two vectors: the lowest and the mean; and the share of each chunk's 10 nearest chunks that
both find). The first line says the CPU, its cores and the load; the ways:

    torch-fp32     sentence-transformers on PyTorch, float32 (the baseline)
    torch-auto     the same in the precision ``SentenceTransformersEmbedder`` picks (bfloat16 where the CPU has it)
    openvino       ``OnnxEmbedder``: OpenVINO on the ONNX export made here from the same weights (it computes in
                   bfloat16 where the CPU has it), batched by length
    onnx-int8      ``OnnxEmbedder``: ONNX Runtime, int8 weights made here from the same weights, batched by length

Recall is measured by ``minions bench evidence --library --meaning --embeddings ...`` on the sets.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minions.backends.embeddings import (
    Embedder,
    OnnxEmbedder,
    SentenceTransformersEmbedder,
    resolve_embedder,
)
from minions.chunking import chunk_document
from minions.documents import load_document
from minions.evals.errors import EvalError
from minions.protocols.search.meaning import chunk_header

from .machine import cpu_model, load_avg
from .options import option

__all__ = ["WAYS", "EmbedBenchConfig", "bench_chunks", "embed_bench"]

WAYS = ("torch-fp32", "torch-auto", "openvino", "onnx-int8")


@dataclass(frozen=True)
class EmbedBenchConfig:
    files: int = option(3, "the first N filings give the chunks")
    """The first N filings (by name) whose chunks are drawn."""
    chunks: int = option(128, "chunks embedded per run")
    pairs: int = option(3, "timed pairs per way, baseline then way")
    model: str | None = option(None, "a sentence-transformers folder", shown="the one auto takes")
    """The model's folder (default: the one "auto" takes that is on disk: bge-small, else the wheel's MiniLM)."""
    ways: tuple[str, ...] = option(WAYS[1:], "only this way", flag="--way", choices=WAYS[1:], repeat=True)
    """The ways timed against the baseline (an uninstalled runtime is skipped, and said)."""


def bench_chunks(folder: Path, files: int, count: int) -> list[str]:
    """``count`` chunks (header and text, as the library embeds them) drawn evenly from the first ``files`` PDFs
    of ``folder`` by name."""
    pdfs = sorted(folder.glob("*.pdf"))[:files]
    if not pdfs:
        raise EvalError(f"No PDF in {folder}: give --data a FinanceBench checkout (its pdfs/) or a folder of PDFs.")
    texts = []
    for pdf in pdfs:
        doc = load_document(pdf)
        texts += [f"{chunk_header(doc.name, None, c.section)}\n{c.text}" for c in chunk_document(doc)]
    step = max(1, len(texts) // count)
    return texts[::step][:count]


def _model_folder(config: EmbedBenchConfig) -> Path:
    if config.model:
        return Path(config.model)
    auto = resolve_embedder("auto")
    folder = getattr(auto, "folder", None) or getattr(auto, "model_path", None)
    if folder is None:
        raise EvalError("No embedding model on disk: give --model a sentence-transformers folder.")
    return Path(folder)


def _ways(folder: Path) -> dict[str, Embedder]:
    return {
        "torch-fp32": SentenceTransformersEmbedder(folder, dtype="float32"),
        "torch-auto": SentenceTransformersEmbedder(folder),
        "openvino": OnnxEmbedder(folder, runtime="openvino"),
        "onnx-int8": OnnxEmbedder(folder, runtime="onnxruntime"),
    }


def _timed(embed: Callable[[Sequence[str]], Any], texts: Sequence[str]) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    vectors = embed(texts)
    return time.perf_counter() - started, np.asarray(vectors, dtype=np.float32)


def _neighbours_shared(a: np.ndarray, b: np.ndarray, k: int = 10) -> float:
    """The share of each chunk's ``k`` nearest chunks (by ``a``'s vectors, and by ``b``'s) that both find."""
    k = min(k, len(a) - 1)
    if k <= 0:
        return 1.0
    near_a = np.argsort(-(a @ a.T), axis=1)[:, 1 : k + 1]
    near_b = np.argsort(-(b @ b.T), axis=1)[:, 1 : k + 1]
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(near_a, near_b, strict=True)]))


def embed_bench(data: Path, config: EmbedBenchConfig) -> Iterator[dict[str, Any]]:
    """The machine line, then one line per way (the module's docstring)."""
    unknown = [w for w in config.ways if w not in WAYS]
    if unknown:
        raise EvalError(f"Unknown ways {unknown}: choose among {', '.join(WAYS)}.")
    texts = bench_chunks(data, config.files, config.chunks)
    folder = _model_folder(config)
    ways = _ways(folder)
    base = ways["torch-fp32"]
    started = time.perf_counter()
    reference = base.embed(texts[:2])  # loads, so no pair pays for it
    for name in config.ways:
        ways[name].embed(texts[:2])  # loads (and, for onnx-int8, quantizes once)
    yield {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_avg": load_avg(),
        "model": str(folder),
        "chunks": len(texts),
        "mean_chars": round(sum(map(len, texts)) / len(texts)),
        "load_s": round(time.perf_counter() - started, 1),
    }
    for name in config.ways:
        way = ways[name]
        base_s, way_s = [], []
        for _ in range(config.pairs):
            b, reference = _timed(base.embed, texts)
            w, vectors = _timed(way.embed, texts)
            base_s.append(b)
            way_s.append(w)
        cosines = np.sum(reference * vectors, axis=1)
        yield {
            "way": name,
            "embedder": way.name,
            "chunks_per_s": round(len(texts) / statistics.median(way_s), 1),
            "baseline_chunks_per_s": round(len(texts) / statistics.median(base_s), 1),
            "ratio": round(statistics.median(b / w for b, w in zip(base_s, way_s, strict=True)), 2),
            "cosine_min": round(float(cosines.min()), 4),
            "cosine_mean": round(float(cosines.mean()), 4),
            "neighbours_shared": round(_neighbours_shared(reference, vectors), 3),
            "load_avg": load_avg(),
        }
