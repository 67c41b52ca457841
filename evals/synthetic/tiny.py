"""Tiny random-weight GGUF models of hybrid architectures, written offline, for tests and benchmarks.

A hybrid model mixes attention layers (a KV cache, one cell per token) with recurrent layers (a fixed-size
state per sequence: LFM2's short convolutions, Mamba-2's SSM). The engine treats their memory differently
(``backends.llamacpp.slots``), so its tests need such models; real ones are hundreds of MB, and nothing may
download weights at run time. ``write_tiny_model`` writes one of a few MB with the ``gguf`` package: a handful
of layers of random weights, and the tokenizer and chat template of a GGUF it copies them from (SmolLM2's, so
prompts tokenize as they do for the shipped model and a SmolLM2 draft shares its vocabulary).

The matrices are stored in Q8_0, as real models are quantized: llama.cpp then computes each token's row of a
matrix product alone (activations quantized per row), so a job batched with others computes what it computes
alone, token for token. (With f16 matrices, products over many rows take another kernel, which rounds otherwise.)

Random weights can make greedy replies collapse into one repeated token. Weights here are scaled so that each
layer changes its input by about as much as the input is worth (residual branches of unit gain) and the logits
spread over a few units: replies then depend on the prompt and wander, with some repeats a drafter can guess.

Random replies cannot be guessed, so speculation drafts next to nothing on these. ``copies=True`` writes an LFM2
whose weights continue the prompt instead (``copier``: an induction head), whose replies quote their excerpt.

    python -m minions.evals.synthetic.tiny lfm2 /tmp/tiny-lfm2.gguf
    python -m minions.evals.synthetic.tiny lfm2 /tmp/tiny-lfm2-copier.gguf --copies
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minions.errors import ConfigError

from .copier import COPIER_ROPE_BASE, HEAD, N_EMBD, copier_tensors

__all__ = ["ARCHITECTURES", "TinySpec", "copy_fields", "finish", "write_tiny_model"]

# Tokenizer fields copied from the source GGUF (the rest of its metadata describes its own weights).
_TOKENIZER_PREFIX = "tokenizer."


@dataclass(frozen=True, slots=True)
class TinySpec:
    arch: str
    layers: tuple[str, ...]
    """Each layer's kind: ``attn`` or ``recurrent`` (LFM2's short convolution, or a Mamba-2 block)."""
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    context: int = 8192
    rope_base: float = 10000.0


ARCHITECTURES: dict[str, TinySpec] = {
    "lfm2": TinySpec("lfm2", ("recurrent", "attn", "recurrent", "attn")),
    "granitehybrid": TinySpec("granitehybrid", ("recurrent", "attn", "recurrent", "attn")),
}
# the LFM2 whose weights copy the prompt (``copier``): the same layers, wider, one KV head
COPIER = dataclasses.replace(
    ARCHITECTURES["lfm2"], n_embd=N_EMBD, n_head=N_EMBD // HEAD, n_head_kv=1, n_ff=256, rope_base=COPIER_ROPE_BASE
)

# Mamba-2 sizes of the granitehybrid model (llama.cpp supports an expansion factor of 2 only).
_SSM_STATE = 16
_SSM_HEADS = 4
_SSM_GROUPS = 1
_SSM_CONV = 4
_SHORTCONV_L = 3


def write_tiny_model(
    path: str | os.PathLike[str],
    arch: str = "lfm2",
    *,
    tokenizer_from: str | os.PathLike[str],
    seed: int = 0,
    copies: bool = False,
    n_ff: int | None = None,
) -> Path:
    """Write a tiny ``arch`` model (``ARCHITECTURES``) to ``path`` with the tokenizer of ``tokenizer_from``.

    ``copies``: weights that continue the prompt (``copier``: an induction head), not random ones; LFM2 only.
    ``n_ff``: the feed-forward width, which sets what a token costs (``--ff 24576`` makes the copier's decode
    step cost about SmolLM2-135M's on a CPU).
    """
    try:
        import gguf
    except ImportError as exc:
        raise ConfigError("Writing a tiny model needs the gguf package: pip install gguf (in '.[dev]').") from exc
    if arch not in ARCHITECTURES:
        raise ConfigError(f"No tiny model of {arch!r}: choose one of {', '.join(ARCHITECTURES)}.")
    if copies and arch != "lfm2":
        raise ConfigError(f"Only the lfm2 architecture has copying weights, not {arch!r}.")
    spec = COPIER if copies else ARCHITECTURES[arch]
    if n_ff is not None:
        spec = dataclasses.replace(spec, n_ff=n_ff)
    out = Path(path)
    source = gguf.GGUFReader(str(tokenizer_from))
    n_vocab = len(source.fields["tokenizer.ggml.tokens"].data)
    writer = gguf.GGUFWriter(str(out), spec.arch)
    _write_header(writer, spec, n_vocab)
    _copy_tokenizer(writer, source)
    rng = np.random.default_rng(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0
    tensors = copier_tensors(n_vocab, spec.n_ff, rng) if copies else _tensors(spec, n_vocab, rng)
    for name, array in tensors:
        if array.dtype == np.float16:  # the matrices, in Q8_0 (see the module's docstring)
            writer.add_tensor(name, gguf.quants.quantize(array.astype(np.float32), q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, array)
    return finish(writer, out)


def finish(writer: Any, out: Path) -> Path:
    """Write what ``writer`` (a ``GGUFWriter`` for ``out``) holds to ``out``: header, metadata, tensors."""
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _write_header(writer: Any, spec: TinySpec, n_vocab: int) -> None:
    writer.add_name(f"tiny-{spec.arch}")
    writer.add_context_length(spec.context)
    writer.add_embedding_length(spec.n_embd)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_block_count(len(spec.layers))
    writer.add_head_count(spec.n_head)
    # a layer with no KV heads is a recurrent one: that is how both architectures mark them
    writer.add_head_count_kv([spec.n_head_kv if kind == "attn" else 0 for kind in spec.layers])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(spec.rope_base)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(7)  # mostly Q8_0
    if spec.arch == "lfm2":
        writer.add_shortconv_l_cache(_SHORTCONV_L)
    else:
        writer.add_ssm_conv_kernel(_SSM_CONV)
        writer.add_ssm_inner_size(2 * spec.n_embd)
        writer.add_ssm_state_size(_SSM_STATE)
        writer.add_ssm_time_step_rank(_SSM_HEADS)
        writer.add_ssm_group_count(_SSM_GROUPS)


def _copy_tokenizer(writer: Any, source: Any) -> None:
    copy_fields(writer, source, lambda key: key.startswith(_TOKENIZER_PREFIX))


def copy_fields(writer: Any, source: Any, keep: Callable[[str], bool]) -> None:
    """Copy the metadata fields of ``source`` (a ``GGUFReader``) whose key ``keep`` accepts to ``writer``."""
    import gguf

    for key, field in source.fields.items():
        if not keep(key):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            values = field.contents()
            writer.add_key_value(key, values, kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), kind)


def _tensors(spec: TinySpec, n_vocab: int, rng: np.random.Generator) -> list[tuple[str, np.ndarray[Any, Any]]]:
    """Every tensor, in numpy's row-major shape (the reverse of llama.cpp's ``ne``)."""
    d, ff, head = spec.n_embd, spec.n_ff, spec.n_embd // spec.n_head

    def w(rows: int, cols: int, gain: float = 1.0) -> np.ndarray[Any, Any]:
        # a linear map of ``cols`` inputs with unit gain: std 1 / sqrt(fan in)
        return (rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(np.float16)

    def ones(*shape: int) -> np.ndarray[Any, Any]:
        return np.ones(shape, dtype=np.float32)

    # The output is tied to the embeddings: logits = norm(h) . E, with rows of E of norm ~3 (logits spread of ~3)
    tensors: list[tuple[str, np.ndarray[Any, Any]]] = [
        ("token_embd.weight", (rng.standard_normal((n_vocab, d)) * 3.0 / np.sqrt(d)).astype(np.float16)),
        ("token_embd_norm.weight" if spec.arch == "lfm2" else "output_norm.weight", ones(d)),
    ]
    for i, kind in enumerate(spec.layers):
        blk = f"blk.{i}"
        tensors += [
            (f"{blk}.attn_norm.weight", ones(d)),
            (f"{blk}.ffn_norm.weight", ones(d)),
            (f"{blk}.ffn_gate.weight", w(ff, d)),
            (f"{blk}.ffn_up.weight", w(ff, d)),
            (f"{blk}.ffn_down.weight", w(d, ff)),
        ]
        if kind == "attn":
            kv = spec.n_head_kv * head
            tensors += [
                (f"{blk}.attn_q.weight", w(d, d, 2.0)),
                (f"{blk}.attn_k.weight", w(kv, d, 2.0)),
                (f"{blk}.attn_v.weight", w(kv, d)),
                (f"{blk}.attn_output.weight", w(d, d)),
            ]
            if spec.arch == "lfm2":
                tensors += [(f"{blk}.attn_q_norm.weight", ones(head)), (f"{blk}.attn_k_norm.weight", ones(head))]
        elif spec.arch == "lfm2":
            tensors += [
                (f"{blk}.shortconv.conv.weight", (rng.standard_normal((d, _SHORTCONV_L)) * 0.7).astype(np.float32)),
                (f"{blk}.shortconv.in_proj.weight", w(3 * d, d)),
                (f"{blk}.shortconv.out_proj.weight", w(d, d)),
            ]
        else:
            tensors += _mamba2(blk, d, w, rng)
    return tensors


def _mamba2(blk: str, d: int, w: Any, rng: np.random.Generator) -> list[tuple[str, np.ndarray[Any, Any]]]:
    inner = 2 * d
    conv_dim = inner + 2 * _SSM_GROUPS * _SSM_STATE
    in_proj = 2 * inner + 2 * _SSM_GROUPS * _SSM_STATE + _SSM_HEADS  # z, x, B, C, dt
    return [
        (f"{blk}.ssm_in.weight", w(in_proj, d)),
        (f"{blk}.ssm_conv1d.weight", (rng.standard_normal((conv_dim, _SSM_CONV)) * 0.5).astype(np.float32)),
        (f"{blk}.ssm_conv1d.bias", np.zeros(conv_dim, dtype=np.float32)),
        (f"{blk}.ssm_dt.bias", np.full(_SSM_HEADS, -1.0, dtype=np.float32)),
        # A = -exp(A_log), stored as is: decays between 0.5 and 2 per unit of dt
        (f"{blk}.ssm_a", -rng.uniform(0.5, 2.0, (_SSM_HEADS, 1)).astype(np.float32)),
        (f"{blk}.ssm_d", np.ones((_SSM_HEADS, 1), dtype=np.float32)),
        (f"{blk}.ssm_norm.weight", np.ones((_SSM_GROUPS, inner // _SSM_GROUPS), dtype=np.float32)),
        (f"{blk}.ssm_out.weight", w(d, inner)),
    ]


def main(argv: list[str] | None = None) -> int:
    from minions.backends.model_files import smollm2_path

    parser = argparse.ArgumentParser(description="Write a tiny random-weight hybrid GGUF model (tests, benchmarks).")
    parser.add_argument("arch", choices=sorted(ARCHITECTURES))
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--copies", action="store_true", help="weights that continue the prompt (lfm2 only)")
    parser.add_argument("--ff", type=int, help="feed-forward width (sets the cost of a token)")
    args = parser.parse_args(argv)
    out = write_tiny_model(
        args.path, args.arch, tokenizer_from=smollm2_path(), seed=args.seed, copies=args.copies, n_ff=args.ff
    )
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
