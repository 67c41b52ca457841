"""A target model that costs what a ~1B model costs per token and mostly agrees with SmolLM2: a real draft pair.

Speculation pays where a decode step reads far more weights than it computes with, so that verifying 8-16 tokens
costs little more than one: a 3B-70B target and a draft ten or more times cheaper. SmolLM2-135M on this 2-core CPU
is the opposite (compute-bound: ``T(9)/T(1) ~ 4``), and nothing bigger may be downloaded. So the target is built
offline from SmolLM2 itself, with the ``gguf`` writer, as the tiny hybrid models are (``tiny``):

- every layer's feed-forward is widened by ``extra_ff`` hidden units (``ffn_gate`` and ``ffn_up`` get rows,
  ``ffn_down`` columns) with random weights, the new ``ffn_down`` columns scaled by ``epsilon``: each layer adds
  ``epsilon`` times a random nonlinear function of its input to the residual stream, a small perturbation, so
  the target's greedy replies follow SmolLM2's on most tokens and part ways where SmolLM2 hesitates, and
  SmolLM2 drafts for it at an acceptance ``epsilon`` sets;
- the widened matrices are stored as ``dtype`` (F32 by default; the original units exactly as SmolLM2's own
  weights dequantize): F32 costs little arithmetic per byte, so the step is bound by reading its weights, as a
  big model's is on a machine with more cores, where SmolLM2's 4-bit matrices are bound by the arithmetic of
  unpacking them. The attention, embeddings and norms stay SmolLM2's, byte for byte.

Widened rather than deepened: the KV cache, the number of layers (each a synchronisation of llama.cpp's threads)
and the graph stay SmolLM2's, and only the matrices that a token reads grow.

``deep_model()`` builds the default recipe once and keeps it under ``cache_dir()/models``, named by its recipe.

    python -m minions.evals.synthetic.deep            # build (or find) the default target, print its path
"""

from __future__ import annotations

import argparse
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minions.errors import ConfigError
from minions.paths import cache_dir

from .tiny import copy_fields, finish

__all__ = ["DEFAULT_RECIPE", "DeepRecipe", "deep_model", "write_deep_model"]

# The FFN matrices a widened feed-forward changes, and which of their axes (numpy's, rows first) grows.
_ROWS = ("ffn_gate", "ffn_up")
_COLS = ("ffn_down",)
# Metadata the writer sets itself, or that the recipe changes.
_SKIP = ("GGUF.", "general.architecture", "general.file_type", "general.name", "llama.feed_forward_length")


@dataclass(frozen=True, slots=True)
class DeepRecipe:
    extra_ff: int = 16384
    """Hidden units added to every layer's feed-forward (a multiple of 32, a quantization block). 16384 makes a
    model of 0.98B parameters (3.8 GB in F32) that decodes at 7-9 tok/s on this project's 2 cores, where a token
    of SmolLM2 costs 0.05-0.06 of one of the target. With 8192 (0.56B, 2.1 GB) it cost 0.1-0.15, and SmolLM2's
    prompts 0.6 of the target's, where a real 1B model's prompts cost about eight times SmolLM2's."""
    epsilon: float = 0.05
    """The size of the perturbation: the added units' output weights are the spread of the layer's own times
    ``epsilon * sqrt(ff / extra_ff)``, so that their sum, over ``extra_ff`` random terms, is about ``epsilon``
    times what the layer's own ``ff`` units add, whatever the width. SmolLM2's greedy choice agrees with the
    target's on 91% of the bench's free-form reply tokens at 0.05, 79-82% at 0.1."""
    dtype: str = "F32"
    """The widened matrices' type: ``F32``, ``F16``, or the source's own (``Q4_0``: its blocks copied as they are)."""
    seed: int = 0

    def key(self) -> str:
        return f"ff{self.extra_ff}-eps{self.epsilon:g}-{self.dtype.lower()}-s{self.seed}"


DEFAULT_RECIPE = DeepRecipe()


def write_deep_model(path: str | os.PathLike[str], source: str | os.PathLike[str], recipe: DeepRecipe) -> Path:
    """Write ``source`` (a llama-architecture GGUF) with every feed-forward widened as ``recipe`` says to ``path``."""
    try:
        import gguf
    except ImportError as exc:
        raise ConfigError("Building the deep target needs the gguf package: pip install gguf (in '.[dev]').") from exc
    if recipe.extra_ff % 32:
        raise ConfigError(f"extra_ff must be a multiple of 32 (a quantization block), not {recipe.extra_ff}.")
    reader = gguf.GGUFReader(str(source))
    arch = str(reader.fields["general.architecture"].contents())
    if arch != "llama":
        raise ConfigError(f"The deep target widens a llama-architecture model, not {arch!r}.")
    ff = int(reader.fields["llama.feed_forward_length"].contents())
    qtype = gguf.GGMLQuantizationType[recipe.dtype.upper()]
    rng = np.random.default_rng(recipe.seed)
    out = Path(path)
    writer = gguf.GGUFWriter(str(out), arch)
    copy_fields(writer, reader, lambda key: not key.startswith(_SKIP))
    writer.add_name(f"{Path(source).stem}-deep-{recipe.key()}")
    writer.add_feed_forward_length(ff + recipe.extra_ff)
    for tensor in reader.tensors:
        kind = tensor.name.split(".")[-2] if tensor.name.startswith("blk.") else ""
        if kind in _ROWS or kind in _COLS:
            data = _widened(tensor, kind in _COLS, qtype, recipe, rng)
            writer.add_tensor(tensor.name, data, raw_dtype=qtype if data.dtype == np.uint8 else None)
        else:  # copied as stored (quantized blocks included)
            plain = tensor.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
            writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=None if plain else tensor.tensor_type)
    return finish(writer, out)


def _widened(tensor: Any, columns: bool, qtype: Any, recipe: DeepRecipe, rng: np.random.Generator) -> Any:
    """``tensor`` (rows first, as numpy holds it) with ``recipe.extra_ff`` more rows (``ffn_gate``, ``ffn_up``:
    more hidden units to compute) or columns (``ffn_down``: their outputs, times ``epsilon``), as ``qtype``."""
    from gguf import quants

    weights = quants.dequantize(tensor.data, tensor.tensor_type)
    spread = float(weights.std())
    rows, cols = weights.shape
    shape = (rows, recipe.extra_ff) if columns else (recipe.extra_ff, cols)
    gain = recipe.epsilon * np.sqrt(cols / recipe.extra_ff) if columns else 1.0  # cols: the layer's own units
    extra = rng.standard_normal(shape, dtype=np.float32) * spread * gain
    axis = 1 if columns else 0
    if qtype == tensor.tensor_type:  # the source's blocks as they are, the new ones quantized alike
        return np.concatenate([np.asarray(tensor.data), quants.quantize(extra, qtype)], axis=axis)
    widened = np.concatenate([weights, extra], axis=axis)
    if qtype.name in ("F32", "F16"):
        return widened.astype(np.float16 if qtype.name == "F16" else np.float32)
    return quants.quantize(widened, qtype)


def deep_path(recipe: DeepRecipe, source: Path) -> Path:
    """Where ``deep_model`` keeps the target of ``recipe`` built from ``source``: named by both."""
    digest = hashlib.sha256(f"{source.name}-{source.stat().st_size}".encode()).hexdigest()[:8]
    return cache_dir() / "models" / f"{source.stem}.deep-{recipe.key()}-{digest}.gguf"


def deep_model(recipe: DeepRecipe = DEFAULT_RECIPE, source: str | os.PathLike[str] | None = None) -> Path:
    """The target of ``recipe`` built from ``source`` (default: the engine's default SmolLM2, Q4_0), built once
    (atomically: a temporary file, then a rename) and then found in the cache."""
    from minions.backends.llamacpp.quantize import default_local_model

    src = Path(source) if source is not None else default_local_model()
    target = deep_path(recipe, src)
    if not target.exists():
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            write_deep_model(tmp, src, recipe)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    d = DEFAULT_RECIPE
    parser = argparse.ArgumentParser(description="Build (once) SmolLM2 widened into a ~1B-cost target model.")
    parser.add_argument("--extra-ff", type=int, default=d.extra_ff, help=f"hidden units added (default {d.extra_ff})")
    parser.add_argument("--epsilon", type=float, default=d.epsilon, help=f"perturbation (default {d.epsilon})")
    parser.add_argument("--dtype", default=d.dtype, help=f"type of the widened matrices (default {d.dtype})")
    parser.add_argument("--seed", type=int, default=d.seed)
    args = parser.parse_args(argv)
    out = deep_model(DeepRecipe(args.extra_ff, args.epsilon, args.dtype, args.seed))
    print(f"{out} ({out.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
