"""The weights of a tiny LFM2 that copies: an induction head written by hand, for speculation's benchmarks.

A random-weight model's replies cannot be guessed, so on one speculation drafts nothing and its benchmark
compares plain decoding with plain decoding. Extraction replies of real models quote the prompt; this model
does only that, with the architecture's own parts (short convolutions, attention, their recurrent state), so
drafts from the prompt are right where a real model's would be, and wrong where the prompt is ambiguous.

How, in the residual stream (``n_embd`` 384, one 128-wide head does the work):

- every token has a random code of three unit parts, ``a``, ``b`` and ``c`` (33 dimensions each); its embedding
  holds the code and a constant dimension;
- layer 0, a short convolution (kernel 3), writes the previous token's ``a`` and ``b`` and the one before's ``b``
  and ``c``; layer 2's writes the ``c`` of the token three back (gates read the constant, so the convolutions pass
  codes through unchanged);
- layer 3, attention: position ``i`` asks for ``a(t[i])``, ``b(t[i-1])`` and ``c(t[i-2])``; position ``j`` offers
  ``a(t[j-1])``, ``b(t[j-2])`` and ``c(t[j-3])``. The best match is a position that followed the same three tokens,
  a weaker one the same two, or the last one; its value, ``t[j]``'s code, goes to an output block that
  ``output.weight`` reads. So the model continues the prompt from where its last tokens occurred (a majority where
  several continuations compete), and a little against repeating its current token;
- layer 1 (attention) computes and adds nothing, and every feed-forward block is zero: their cost and the
  layers' state are real (``n_ff`` sets the cost of a token).

RoPE would turn query and key apart with distance. With a base of 1e38 the slowest frequencies turn less than
0.05 radians over the context, so the codes use only those dimensions of the head (under both pair layouts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["COPIER_ROPE_BASE", "copier_tensors"]

COPIER_ROPE_BASE = 1e38
N_EMBD, HEAD, PART = 384, 128, 33
_AVOID_PAIRS = 9  # pairs 0..8 turn more than 0.05 rad over 8192 positions with a base of 1e38
_QUERY_GAIN = 1.7  # q_norm/k_norm weights: three tokens matched score ~33, two ~22, one ~11, noise std ~3
_OUTPUT_GAIN = 0.6
_ANTI_REPEAT = 0.5


def _head_dims() -> list[int]:
    """Dimensions of a head that RoPE turns slowly both as (i, i + HEAD/2) pairs and as (2i, 2i + 1) pairs."""
    fast = set(range(2 * _AVOID_PAIRS)) | set(range(_AVOID_PAIRS)) | {HEAD // 2 + i for i in range(_AVOID_PAIRS)}
    return [i for i in range(HEAD) if i not in fast]


def copier_tensors(n_vocab: int, n_ff: int, rng: np.random.Generator) -> list[tuple[str, np.ndarray[Any, Any]]]:
    """Every tensor of the 4-layer copier (recurrent, attention, recurrent, attention), numpy row-major."""
    d = N_EMBD
    head = _head_dims()
    qa, qb, qc, val = head[:PART], head[PART : 2 * PART], head[2 * PART : 3 * PART], head[: 3 * PART]
    # residual layout: a constant, the token's code (a, b, c), lagged parts, the output block
    const = 0
    spans = iter(range(1, d))

    def block(n: int) -> np.ndarray[Any, Any]:
        return np.array([next(spans) for _ in range(n)])

    cur = block(3 * PART)
    cur_a, cur_b, cur_c = cur[:PART], cur[PART : 2 * PART], cur[2 * PART :]
    lag1_a, lag1_b, lag2_b, lag2_c, lag3_c = (block(PART) for _ in range(5))
    out = block(3 * PART)

    parts = rng.standard_normal((3, n_vocab, PART))
    parts /= np.linalg.norm(parts, axis=2, keepdims=True)
    code = np.concatenate(list(parts), axis=1)  # (vocab, 3 * PART): a, b, c, each of unit norm

    embd = np.zeros((n_vocab, d), np.float32)
    embd[:, const] = 1.0
    embd[:, cur] = code
    embd[:, out] = -_ANTI_REPEAT * code
    output = np.zeros((n_vocab, d), np.float32)
    output[:, out] = _OUTPUT_GAIN * code
    # A layer reads its input normalized; every embedding has the same norm, and so (after the first tokens) has
    # every residual: one factor per layer undoes the norm. Layer 0's lags add four unit parts.
    unnorm = {0: float(np.linalg.norm(embd[0])), 2: float(np.sqrt(np.linalg.norm(embd[0]) ** 2 + 4))}
    # channel, source, tap (taps run oldest first: 0 is two tokens back, 1 the previous token)
    shifts = {
        0: [(lag1_a, cur_a, 1), (lag1_b, cur_b, 1), (lag2_b, cur_b, 0), (lag2_c, cur_c, 0)],
        2: [(lag3_c, lag2_c, 1)],
    }

    def zeros(*shape: int) -> np.ndarray[Any, Any]:
        return np.zeros(shape, np.float32)

    def ones(n: int) -> np.ndarray[Any, Any]:
        return np.ones(n, np.float32)

    tensors: list[tuple[str, np.ndarray[Any, Any]]] = [
        ("token_embd.weight", embd.astype(np.float16)),
        ("token_embd_norm.weight", ones(d)),
        ("output.weight", output.astype(np.float16)),
    ]
    for i, kind in enumerate(("recurrent", "attn", "recurrent", "attn")):
        blk = f"blk.{i}"
        tensors += [
            (f"{blk}.attn_norm.weight", ones(d)),
            (f"{blk}.ffn_norm.weight", ones(d)),
            (f"{blk}.ffn_gate.weight", zeros(n_ff, d).astype(np.float16)),
            (f"{blk}.ffn_up.weight", zeros(n_ff, d).astype(np.float16)),
            (f"{blk}.ffn_down.weight", zeros(d, n_ff).astype(np.float16)),
        ]
        if kind == "recurrent":
            in_proj, conv, out_proj = zeros(3 * d, d), zeros(d, 3), zeros(d, d)
            scale = unnorm[i] / np.sqrt(d)
            for channels, sources, tap in shifts[i]:
                for ch, src in zip(channels, sources, strict=True):
                    # in_proj's rows are gate B, gate C and x: both gates read the constant (1), x the source
                    in_proj[ch, const] = in_proj[d + ch, const] = in_proj[2 * d + ch, src] = scale
                    conv[ch, tap] = 1.0
                    out_proj[ch, ch] = 1.0
            tensors += [
                (f"{blk}.shortconv.conv.weight", conv),
                (f"{blk}.shortconv.in_proj.weight", in_proj.astype(np.float16)),
                (f"{blk}.shortconv.out_proj.weight", out_proj.astype(np.float16)),
            ]
        else:
            q, k, v, o = zeros(d, d), zeros(HEAD, d), zeros(HEAD, d), zeros(d, d)
            if i == 3:  # head 0 (the others' queries are zero, and the output ignores them)
                q[qa, cur_a], q[qb, lag1_b], q[qc, lag2_c] = 1.0, 1.0, 1.0
                k[qa, lag1_a], k[qb, lag2_b], k[qc, lag3_c] = 1.0, 1.0, 1.0
                v[val, cur] = 1.0
                o[out, val] = 1.0
            tensors += [
                (f"{blk}.attn_q.weight", q.astype(np.float16)),
                (f"{blk}.attn_k.weight", k.astype(np.float16)),
                (f"{blk}.attn_v.weight", v.astype(np.float16)),
                (f"{blk}.attn_output.weight", o.astype(np.float16)),
                (f"{blk}.attn_q_norm.weight", np.full(HEAD, _QUERY_GAIN, np.float32)),
                (f"{blk}.attn_k_norm.weight", np.full(HEAD, _QUERY_GAIN, np.float32)),
            ]
    return tensors
