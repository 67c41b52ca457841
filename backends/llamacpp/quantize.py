"""Converted copies of the default model, cached in the user's cache directory.

SmolLM2 ships as Q4_1. On x86 CPUs llama.cpp repacks Q4_0 weights into its fastest kernels, so a Q4_0 copy
prefills markedly faster (measured numbers are in docs/local-models.md). ``llama_model_quantize``
converts the 100 MB file in about a second; the copy is made once and reused.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from minions.errors import ConfigError
from minions.events import SETUP_LOG
from minions.paths import cache_dir

from ..model_files import smollm2_path
from ..settings import cpu_threads

__all__ = ["DEFAULT_QUANTIZATION", "QUANT_TYPES", "default_local_model", "quantize"]

log = logging.getLogger(__name__)
setup_log = logging.getLogger(SETUP_LOG)

# Chosen from the measurements in docs/local-models.md.
DEFAULT_QUANTIZATION = "Q4_0"

# llama.cpp's LLAMA_FTYPE_MOSTLY_* values.
QUANT_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q4_K_M": 15, "Q6_K": 18}


def quantize(source: Path, target: Path, qtype: str) -> Path:
    """Write ``source`` re-quantized as ``qtype`` to ``target`` (atomically), unless it exists already."""
    from .ffi import import_llama_cpp

    if target.exists():
        return target
    key = qtype.upper()
    if key not in QUANT_TYPES:
        raise ConfigError(f"Unknown quantization {qtype!r}: choose one of {', '.join(QUANT_TYPES)}.")
    llama_cpp = import_llama_cpp()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[key]
    params.allow_requantize = True
    params.nthread = cpu_threads()
    target.parent.mkdir(parents=True, exist_ok=True)
    setup_log.info("converting %s to %s for this CPU, once (a second or two), into %s", source.name, key, target.parent)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), params)
    if rc != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"Converting {source.name} to {key} failed (llama.cpp returned {rc}).")
    tmp.replace(target)
    log.info("converted %s to %s at %s", source.name, key, target)
    return target


def default_local_model(quantization: str | None = "auto") -> Path:
    """The embedded SmolLM2, as ``quantization`` (``"auto"``: the measured default; None: as shipped)."""
    source = smollm2_path()
    key = DEFAULT_QUANTIZATION if quantization == "auto" else (quantization or "Q4_1").upper()
    if key == "Q4_1":
        return source
    target = cache_dir() / "models" / source.name.replace(".Q4_1.gguf", f".{key}.gguf")
    return quantize(source, target, key)


def measure_speed(
    path: Path, *, prompt_tokens: int = 512, decode_tokens: int = 64, n_threads: int | None = None
) -> dict[str, float]:
    """Prefill and greedy-decode tokens per second of one GGUF file, with the high-level API."""
    import time

    from .ffi import import_llama_cpp

    llama_cpp = import_llama_cpp()
    llm = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=prompt_tokens + decode_tokens + 16,
        n_batch=512,
        n_threads=cpu_threads(n_threads),
        verbose=False,
    )
    text = "The cooperative reported revenue, expenses and production for each of its solar arrays. " * 64
    tokens = llm.tokenize(text.encode())[:prompt_tokens]
    llm.reset()
    start = time.perf_counter()
    llm.eval(tokens)
    prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(decode_tokens):
        llm.eval([llm.sample(temp=0.0)])
    decode_s = time.perf_counter() - start
    llm.close()
    return {"prefill_tok_s": len(tokens) / prefill_s, "decode_tok_s": decode_tokens / decode_s}


def compare_quantizations(types: tuple[str, ...] = ("Q4_1", "Q4_0", "Q8_0"), repeats: int = 3) -> list[dict[str, Any]]:
    """Speed of the default model in each quantization, best of ``repeats`` interleaved runs, and the ratio
    to the shipped Q4_1 measured in the same process."""
    paths = {t: default_local_model(t) for t in types}
    best: dict[str, dict[str, float]] = {t: {"prefill_tok_s": 0.0, "decode_tok_s": 0.0} for t in types}
    for _ in range(repeats):
        for t in types:
            m = measure_speed(paths[t])
            best[t] = {k: max(best[t][k], m[k]) for k in m}
    base = best[types[0]]
    return [
        {
            "quantization": t,
            "size_mb": round(paths[t].stat().st_size / 1e6, 1),
            **{k: round(v, 1) for k, v in best[t].items()},
            "prefill_vs_" + types[0]: round(best[t]["prefill_tok_s"] / base["prefill_tok_s"], 2),
            "decode_vs_" + types[0]: round(best[t]["decode_tok_s"] / base["decode_tok_s"], 2),
        }
        for t in types
    ]
