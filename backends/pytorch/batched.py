"""Several jobs decoded together: one forward pass per step verifies every job's tree.

Each job is a row of one cache. Rows hold prompts of different lengths and accept different numbers of drafts,
so the cache never drops anything: a row's cells are marked valid or not (``valid[b, j]``), a row attends only
to its valid cells, and its tokens sit at positions counted over its own valid cells (rotary positions come from
``position_ids``, not from where a cell is). Prefill pads the shorter prompts; each step appends ``n`` cells to
every row, ``n`` the largest tree of the step, and marks valid only the accepted path of each row (a smaller
tree is padded with nodes that attend to themselves alone and are never valid; a finished row sends only
padding). When that halves the cache, every row's valid cells are gathered to the front.

Every job walks its own tree with its own chooser (greedy or sampled, grammar-masked), so each reply is what
``decode.generate`` gives for it alone, up to the float differences of computing several rows at once (tests
check greedy replies against one-at-a-time decoding). Drafts come from each job's own text; models with
recurrent or convolution state are decoded one at a time (``TransformersBackend.batch``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from .decode import Decoded, DecodeState, Speculation, active
from .tree import TokenTree, additive, ancestors

__all__ = ["generate_batch"]

COMPACT_AT = 0.5
"""Gather the valid cells to the front when that shrinks the cache below this share of its cells (the row with
the most valid cells sets the new length)."""


def _mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask ``[B, 1, q, k]`` from a boolean ``[B, q, k]``."""
    return additive(allowed, dtype)[:, None]


@torch.inference_mode()
def _prefill(model: Any, cache: Any, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
    """Every prompt but its last token into ``cache``, right-padded; the valid cells ``[B, P]``."""
    lengths = [len(p) - 1 for p in prompts]
    width = max(1, max(lengths))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    valid = torch.zeros(len(prompts), width, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, : lengths[b]] = torch.tensor(list(p[:-1]), dtype=torch.long)
        valid[b, : lengths[b]] = True
    positions = (valid.cumsum(-1) - 1).clamp(min=0)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    allowed = causal[None] & valid[:, None, :]
    allowed |= torch.eye(width, dtype=torch.bool)[None]  # a padding query attends to itself: no empty row
    model(input_ids=ids.to(model.device), position_ids=positions.to(model.device),
          attention_mask=_mask(allowed, model.dtype).to(model.device), cache=cache, use_cache=True)  # fmt: skip
    return valid


@torch.inference_mode()
def _verify(
    model: Any, cache: Any, trees: Sequence[TokenTree], valid: torch.Tensor, past: Sequence[int]
) -> torch.Tensor:
    """One forward over every row's tree (padded to the largest); logits ``[B, n, V]`` (float32, CPU)."""
    n = max(len(t) for t in trees)
    rows, cells = valid.shape
    ids = torch.zeros(rows, n, dtype=torch.long)
    positions = torch.zeros(rows, n, dtype=torch.long)
    allowed = torch.zeros(rows, n, cells + n, dtype=torch.bool)
    allowed[:, :, :cells] = valid[:, None, :]
    for b, tree in enumerate(trees):
        ids[b, : len(tree)] = torch.tensor(tree.tokens)
        positions[b, : len(tree)] = torch.tensor([past[b] + d for d in tree.depths()])
        allowed[b, : len(tree), cells : cells + len(tree)] = ancestors(tree)
        allowed[b, len(tree) :, :cells] = False  # padding nodes see only themselves
        for i in range(len(tree), n):
            allowed[b, i, cells + i] = True
    out = model(input_ids=ids.to(model.device), position_ids=positions.to(model.device),
                attention_mask=_mask(allowed, model.dtype).to(model.device), cache=cache, use_cache=True)  # fmt: skip
    return out.logits.float().cpu()


@torch.inference_mode()
def _compact(cache: Any, valid: torch.Tensor) -> torch.Tensor:
    """Gather each row's valid cells to the front of every layer; the new valid mask."""
    counts = valid.sum(-1)
    keep = int(counts.max())
    order = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)[:, :keep]  # valid cells first, in order
    for layer in cache.layers:
        for name in ("keys", "values"):
            cached = getattr(layer, name)
            index = order.to(cached.device)[:, None, :, None].expand(-1, cached.shape[1], -1, cached.shape[-1])
            setattr(layer, name, cached.gather(2, index))
    return torch.arange(keep)[None, :] < counts[:, None]


def generate_batch(
    model: Any, new_cache: Any, jobs: Sequence[DecodeState], *, speculation: Speculation | None
) -> list[Decoded]:
    """Decode ``jobs`` together into a cache from ``new_cache()``; each job's ``out`` is filled in and returned.

    Drafts come from each job's text (``speculation``'s acceptance and cost shape every row's tree alike);
    ``speculation=None`` or mode plain decodes plainly, one token per row per step.
    """
    spec = active(speculation)
    width = spec.width if spec is not None else 1
    cache = new_cache()
    start = time.perf_counter()
    valid = _prefill(model, cache, [job.prompt for job in jobs])
    prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    past = [len(job.prompt) - 1 for job in jobs]
    while not all(job.done for job in jobs):
        shaped = [job.tree(spec, width, None) if not job.done else (TokenTree.chain(job.root), [0], [1.0])
                  for job in jobs]  # fmt: skip
        trees = [tree for tree, _, _ in shaped]
        logits = _verify(model, cache, trees, valid, past)  # [B, n, V]
        n = logits.shape[1]
        kept = torch.zeros(len(jobs), n, dtype=torch.bool)
        for b, job in enumerate(jobs):
            if job.done:
                continue
            tree, ranks, _ = shaped[b]
            path, emitted = job.accept(tree, logits[b, : len(tree)])
            if spec is not None:
                spec.acceptance.record(tree, ranks, path)
            # the path's cells in path order are the next positions: a node's cell is valid, its order by depth
            kept[b, path] = True
            past[b] += len(path)
            job.emit(tree, path, emitted)
        valid = torch.cat([valid, kept], dim=-1)
        if int(valid.sum(-1).max()) < COMPACT_AT * valid.shape[1]:
            valid = _compact(cache, valid)
    seconds = time.perf_counter() - start
    for job in jobs:  # the batch's time shared out by tokens
        job.out.prefill_s = prefill_s / len(jobs)
        job.out.decode_s = seconds * len(job.out.tokens) / max(1, sum(len(j.out.tokens) for j in jobs))
    return [job.out for job in jobs]
