"""``minions bench speculative --target deep|PATH --draft PATH``: speculation measured where it can pay.

``--target deep`` builds (once, then from the cache) SmolLM2 widened into a target that costs what a ~1B model
costs per token (``deep``), and drafts for it with SmolLM2 itself; ``--target PATH --draft PATH`` measures any
pair with one vocabulary. Before the speculative bench's lines (``bench.speculative``, run on the target with
the draft model as one more drafter), these lines say what regime the pair is in:

- ``models``: each model's size and greedy decode tokens per second (best of ``repeats``, interleaved), and
  ``draft_cost``: the draft's time per token over the target's;
- ``verify_cost``: the target's ``T(k)/T(1)`` for one sequence, k = 1..32 tokens in a call with logits for
  each (as a verify call reads them), after a 512-token prefix; median of ``repeats`` rounds over every k;
- ``batch_cost``, for each batch size over 1 the bench runs (``batch_costs``): the target's ``T_b(n)/T_b(1)``, a
  call over ``n`` tokens of each of ``b`` sequences against one over one token of each (a verify step against a
  plain one), n = 1 .. ``1 + k_max``, the draft's cost of a drafted position over the ``b`` sequences, and
  what calls that llama.cpp splits further cost (``splits``);
- ``agreement``: per setting, the share of the target's greedy reply tokens that the draft's greedy choice
  given the same text before them equals (the acceptance a draft chain of any length has at each position),
  over the bench's jobs, the draft choosing among what the job's grammar allows, as it drafts in the engine;
  and ``chain_bound``, what that acceptance ``a`` and the two measured costs allow a draft chain at batch 1:
  the best ``E(a, k) / (T(1 + k) / T(1) + k c)`` over ``k``, where ``E(a, k) = 1 + a + ... + a^k`` tokens come
  from a step that verifies ``1 + k`` tokens and drafts ``k`` at ``c`` (``draft_cost``) each. Where it is near
  1, the curve is too steep for speculation (and for token trees, which verify more).
  ``rank_shares``: how often the target's token is the draft's first, second, ... choice; ``tree_bound``: the
  best token tree's speedup by the same measure, its nodes the draft's best choices after each node, valued by
  those shares; ``trees`` says whether it gains ``TREE_GAIN`` (1.2x) over the chain bound, and if not, whether
  the curve is too steep (a tree would gain that on a flat curve, ``tree_over_chain_if_flat``) or the draft's
  further choices are right too seldom for any curve. ``chain_bound_batch_<b>``: the chain bound at batch ``b``,
  over the ``batch_cost`` line's costs (the first drafted position at ``draft_first_cost``), and what it says in
  words.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from minions.backends.speculation.speculator import K_MAX

from ..financebench import find_filing
from .engine import BenchConfig, load_chunks
from .speculative import SpecBenchConfig, _jobs, speculative_bench

__all__ = [
    "VERIFY_TOKENS",
    "agreement",
    "batch_costs",
    "call_costs",
    "chain_bound",
    "deep_bench",
    "resolve_pair",
    "tree_bound",
    "verify_costs",
]

VERIFY_TOKENS = tuple(range(1, 33))
"""The call sizes of ``verify_cost``."""
PREFIX = 512
"""Tokens in the sequence before the timed calls (a job's excerpt and instruction)."""
BATCH_PREFIX = 64
"""Tokens in each sequence before the timed calls over a batch (``batch_costs``)."""
RANKS = 4
"""The draft's choices counted by ``agreement`` (``rank_shares``), and the children a node of ``tree_bound`` has."""


TREE_GAIN = 1.2
"""What a token tree must gain over a chain for this bench to say that trees can pay."""


def resolve_pair(target: str, draft: str | None) -> tuple[Path, Path]:
    """``deep`` (the default recipe, built once) or a GGUF path; the draft defaults to the engine's SmolLM2."""
    from minions.backends.llamacpp.quantize import default_local_model

    from ..synthetic.deep import deep_model

    target_path = deep_model() if target == "deep" else Path(target)
    return target_path, Path(draft) if draft else default_local_model()


def verify_costs(
    path: Path,
    *,
    n_threads: int,
    tokens: Sequence[int] = VERIFY_TOKENS,
    repeats: int = 5,
    seqs: int = 1,
    prefix: int = PREFIX,
) -> dict[int, float]:
    """Seconds of one call over ``k`` tokens of each of ``seqs`` sequences (``prefix`` tokens held by each), logits
    for each token, for every ``k`` in ``tokens``."""
    shapes = {k: [k] * seqs for k in tokens}
    return call_costs(path, shapes, n_threads=n_threads, repeats=repeats, prefix=prefix)


def call_costs(
    path: Path, shapes: Mapping[Any, Sequence[int]], *, n_threads: int, repeats: int = 5, prefix: int = PREFIX
) -> dict[Any, float]:
    """Seconds of one call of each shape (the tokens each sequence carries, in the order of their ids; 0: that
    sequence is not in the call), logits for each token, every sequence holding ``prefix`` tokens; the median of
    ``repeats`` rounds over the shapes, after a round that warms them up."""
    from minions.backends.llamacpp.ffi import LlamaContext, LlamaModel, TokenBatch

    model = LlamaModel(path)
    seqs = max(len(shape) for shape in shapes.values())
    most = max(sum(shape) for shape in shapes.values())
    ctx = LlamaContext(model, seq_ctx=prefix + most + 16, n_seq_max=seqs, n_batch=max(prefix, most),
                       n_threads=n_threads, n_outputs=most)  # fmt: skip
    batch = TokenBatch(model.lib, max(prefix, most))
    times: dict[Any, list[float]] = {key: [] for key in shapes}
    try:
        for seq in range(seqs):
            batch.clear()
            batch.add([(17 * i + 11 + seq) % model.n_vocab for i in range(prefix)], 0, seq, logits_last=True)
            ctx.decode(batch)
        for round_ in range(repeats + 1):  # the first warms up: building the graphs, repacking
            for key, shape in shapes.items():
                batch.clear()
                for seq, k in enumerate(shape):
                    if k:
                        batch.add([(31 * j + 7 + seq) % 1000 for j in range(k)], prefix, seq, logits_last=False)
                batch.want[: sum(shape)] = 1
                start = time.perf_counter()
                ctx.decode(batch)
                if round_:
                    times[key].append(time.perf_counter() - start)
                for seq in range(seqs):
                    ctx.seq_rm(seq, prefix, -1)
    finally:
        ctx.close()
        model.close()
    return {key: sorted(t)[len(t) // 2] for key, t in times.items()}


def batch_costs(
    target: Path, draft: Path, batch: int, *, n_threads: int, repeats: int, k_max: int = K_MAX
) -> dict[str, Any]:
    """What a step over ``batch`` sequences costs (``batch_cost``): the target's ``T_b(n)/T_b(1)``, a call over
    ``n`` tokens of each sequence against one over one token of each, n = 1 .. ``1 + k_max``; and ``draft_cost``,
    the draft's call over one token of each sequence (a drafted position) against the target's, and
    ``draft_first_cost``, its call over two tokens of each (a step's first drafted position: the draft also
    computes the last step's last accepted token). The sequences hold ``BATCH_PREFIX`` tokens each (computing 512
    for each of 8 would take a 1B target minutes).

    ``splits``: calls that llama.cpp splits into more ubatches than their lengths need (``speculation.CallCost``),
    against ``T_b(1)``: 3 and 1 tokens by turns along the ids against the same lengths grouped, and every other
    sequence with one token against as many sequences with consecutive ids."""
    sizes = range(1, k_max + 2)
    shapes: dict[Any, list[int]] = {n: [n] * batch for n in sizes}
    by_turns = [3 if i % 2 == 0 else 1 for i in range(batch)]
    apart = [1 if i % 2 == 0 else 0 for i in range(batch)]
    splits = {"3 and 1 tokens by turns": by_turns, "3 and 1 tokens grouped": sorted(by_turns, reverse=True),
              "every other sequence": apart, "as many, ids consecutive": sorted(apart, reverse=True)}  # fmt: skip
    costs = call_costs(target, {**shapes, **splits}, n_threads=n_threads, repeats=repeats, prefix=BATCH_PREFIX)
    drafted = verify_costs(draft, n_threads=n_threads, tokens=(1, 2), repeats=repeats, seqs=batch, prefix=BATCH_PREFIX)
    return {
        "batch": batch,
        "verify_cost": {n: round(costs[n] / costs[1], 3) for n in sizes},
        "t1_ms": round(costs[1] * 1e3, 1),
        "draft_cost": round(drafted[1] / costs[1], 3),
        "draft_first_cost": round(drafted[2] / costs[1], 3),
        "splits": {name: round(costs[name] / costs[1], 3) for name in splits},
    }


def _batch_words(batch: int, bound: dict[str, float], costs: dict[int, float]) -> str:
    """What ``chain_bound`` over a batch's costs says, in words."""
    if bound["k"] == 0:
        return (f"at batch {batch} no draft chain can pay here: verifying a second token of each sequence costs "
                f"{costs[2]:.2f} plain steps")  # fmt: skip
    k = int(bound["k"])
    return (
        f"at batch {batch} a draft chain can gain at most {bound['speedup']:.2f}x here ({k} drafted tokens a "
        f"sequence, a call {costs[1 + k]:.2f} plain steps)"
    )


def agreement(target: Path, draft: Path, jobs: Sequence[Any], *, n_threads: int) -> dict[str, Any]:
    """The target's greedy replies to ``jobs`` (plain decoding), and the share of their tokens that the draft's
    greedy choice after the same tokens equals (``agreement``; ``rank_shares``: its first to ``RANKS``-th
    choice): one call over each prompt and reply on the draft."""
    from minions.backends.llamacpp.engine import Engine, EngineConfig
    from minions.backends.llamacpp.ffi import LlamaContext, LlamaModel, TokenBatch
    from minions.backends.llamacpp.sampling import GrammarCache, GrammarState

    with_target = Engine(target, EngineConfig(max_seqs=len(jobs), n_threads=n_threads, speculate=False))
    try:
        results = with_target.run(jobs, speculate=False, trace_tokens=True)
    finally:
        with_target.close()
    model = LlamaModel(draft)
    longest = max(len(r.stats["prompt_ids"]) + len(r.stats["token_ids"]) for r in results)
    ctx = LlamaContext(model, seq_ctx=longest + 16, n_seq_max=1, n_batch=longest, n_threads=n_threads,
                       n_outputs=longest)  # fmt: skip
    batch = TokenBatch(model.lib, longest)
    grammars = GrammarCache(model)
    ranks, total = [0] * RANKS, 0
    try:
        for job, r in zip(jobs, results, strict=True):
            prompt, reply = list(r.stats["prompt_ids"]), list(r.stats["token_ids"])
            schema = job.params.json_schema  # the draft drafts what the job's grammar allows, as in the engine
            grammar = None if schema is None else GrammarState(model, grammars.new_sampler(schema))
            batch.clear()
            batch.add(prompt + reply[:-1], 0, 0, logits_last=False)
            batch.want[len(prompt) - 1 : batch.n] = 1  # the logits that predict each reply token
            ctx.decode(batch)
            for i, token in enumerate(reply):
                logits = ctx.logits(len(prompt) - 1 + i)
                if grammar is not None:
                    logits = grammar.masked(logits)
                    grammar.accept(token)
                better = int(np.count_nonzero(logits > logits[token]))  # the draft's rank of the target's token
                if better < RANKS:
                    ranks[better] += 1
            total += len(reply)
            ctx.seq_rm(0, -1, -1)
            if grammar is not None:
                grammar.close()
    finally:
        grammars.close()
        ctx.close()
        model.close()
    shares = [round(n / max(1, total), 3) for n in ranks]
    return {"agreement": shares[0], "rank_shares": shares, "tokens": total, "jobs": len(results)}


def chain_bound(
    a: float, costs: dict[int, float], draft_cost: float, first_cost: float | None = None
) -> dict[str, float]:
    """The draft length ``k`` that maximises a chain's expected speedup at batch 1, and that speedup (the
    module's docstring); ``k = 0`` is plain decoding, 1.0. ``first_cost``: the first drafted position's cost where
    it differs from the others' (over a batch, the draft's first call also computes each sequence's last
    accepted tokens)."""
    best_k, best = 0, 1.0
    first = draft_cost if first_cost is None else first_cost
    for k in range(1, max(costs)):
        emitted = sum(a**i for i in range(k + 1))  # E(a, k) = 1 + a + ... + a^k
        speedup = emitted / (costs[1 + k] / costs[1] + first + (k - 1) * draft_cost)
        if speedup > best:
            best_k, best = k, speedup
    return {"k": best_k, "speedup": round(best, 3)}


def tree_bound(shares: Sequence[float], costs: dict[int, float], draft_cost: float) -> dict[str, float]:
    """The best token tree's expected speedup at batch 1, by the same measure as ``chain_bound``: each node's
    children are the draft's best ``len(shares)`` tokens after it, the ``r``-th right with chance ``shares[r]``
    (one of them at most), so a node's value is its parent's times its rank's share. It costs ``T(n)/T(1)`` to
    verify a tree's ``n`` tokens and ``c`` (``draft_cost``) for each node the draft computes to propose children
    (a chain of ``k``: ``k``). The trees tried are, for each depth limit, the most valued nodes within it (best
    first: every prefix is a tree), each prefix; with one share they are ``chain_bound``'s chains. Also the nodes
    and the depth of the best tree."""
    best = {"nodes": 1, "depth": 0, "speedup": 1.0}
    for limit in range(1, max(costs)):
        values, parents, depths = _best_first(shares, limit, max(costs))
        emitted = 1.0
        for n in range(2, len(values) + 1):
            emitted += values[n - 1]
            internal = len(set(parents[1:n]))
            speedup = emitted / (costs[n] / costs[1] + internal * draft_cost)
            if speedup > best["speedup"] + 1e-9:
                best = {"nodes": n, "depth": max(depths[:n]), "speedup": round(speedup, 3)}
    return best


def _best_first(shares: Sequence[float], limit: int, most: int) -> tuple[list[float], list[int], list[int]]:
    """Up to ``most`` nodes (the root first) of the tree whose node of rank ``r`` is worth its parent's value
    times ``shares[r]``, best first, none deeper than ``limit``: each node's value, parent and depth."""
    heap = [(-shares[0], 1, 0, 1, 0)]  # (-value, order, parent, depth, rank) of the nodes on offer
    order = 1
    values, parents, depths = [1.0], [-1], [0]
    while heap and len(values) < most:
        neg, _, parent, depth, rank = heapq.heappop(heap)
        values.append(-neg)
        parents.append(parent)
        depths.append(depth)
        # on offer now: the sibling of the next rank, and the node's own best child
        if rank + 1 < len(shares):
            order += 1
            heapq.heappush(heap, (-values[parent] * shares[rank + 1], order, parent, depth, rank + 1))
        if depth < limit:
            order += 1
            heapq.heappush(heap, (-values[-1] * shares[0], order, len(values) - 1, depth + 1, 0))
    return values, parents, depths


def _trees(over: float, over_flat: float) -> str:
    """What the tree bounds say, in words: ``over`` on the measured curve, ``over_flat`` were verifying free."""
    if over >= TREE_GAIN:
        return f"a token tree can gain {over:.2f}x over a chain here"
    if over_flat >= TREE_GAIN:
        return (f"the verify curve is too steep for trees: they would gain {over_flat:.2f}x over a chain were "
                f"verifying free, {over:.2f}x on this curve")  # fmt: skip
    return (f"the draft's further choices are right too seldom for trees (rank_shares): {over_flat:.2f}x over a "
            "chain even were verifying free")  # fmt: skip


def _speeds(paths: Sequence[Path], n_threads: int, repeats: int) -> list[float]:
    from minions.backends.llamacpp.quantize import measure_speed

    best = [0.0] * len(paths)
    for _ in range(repeats):  # interleaved: a burst of load falls on both
        for i, path in enumerate(paths):
            best[i] = max(best[i], measure_speed(path, n_threads=n_threads)["decode_tok_s"])
    return best


def deep_bench(
    data: str | os.PathLike[str] | None, config: SpecBenchConfig, target: str = "deep"
) -> Iterator[dict[str, Any]]:
    """The three lines of the module's docstring, then the speculative bench on ``target`` (``deep`` or a GGUF)
    with ``config.draft`` (default: the engine's SmolLM2) as its draft model; each line as soon as it is
    measured."""
    from minions.backends.llamacpp.engine import EngineConfig
    from minions.backends.llamacpp.ffi import LlamaModel

    pdf = find_filing(config.document, data)  # before minutes of building and measuring
    target_path, draft_path = resolve_pair(target, config.draft)
    n_threads = EngineConfig(n_threads=config.n_threads).threads
    load = os.getloadavg()[0]
    target_tok_s, draft_tok_s = _speeds((target_path, draft_path), n_threads, max(1, config.repeats))
    draft_cost = target_tok_s / draft_tok_s
    yield {
        "models": {
            name: {"path": str(p), "size_mb": round(p.stat().st_size / 1e6), "decode_tok_s": round(s, 1)}
            for name, p, s in (("target", target_path, target_tok_s), ("draft", draft_path, draft_tok_s))
        },
        "draft_cost": round(draft_cost, 3),
        "n_threads": n_threads,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    load = os.getloadavg()[0]
    costs = verify_costs(target_path, n_threads=n_threads, repeats=max(3, config.repeats))
    yield {
        "verify_cost": {k: round(s / costs[1], 3) for k, s in costs.items()},
        "t1_ms": round(costs[1] * 1e3, 1),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    by_batch = {}
    for b in sorted({b for b in config.batches if b > 1}):
        load = os.getloadavg()[0]
        by_batch[b] = batch_costs(target_path, draft_path, b, n_threads=n_threads, repeats=max(3, config.repeats),
                                  k_max=config.k_max)  # fmt: skip
        yield {"batch_cost": by_batch[b], "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}
    model = LlamaModel(target_path)
    try:
        chunks = load_chunks(pdf, model, BenchConfig(chunks=config.chunks, chunk_tokens=config.chunk_tokens))
    finally:
        model.close()
    agreed = {}
    for setting in config.settings:
        report = agreement(target_path, draft_path, _jobs(setting, chunks, config), n_threads=n_threads)
        chain = chain_bound(float(report["agreement"]), costs, draft_cost)
        tree = tree_bound(report["rank_shares"], costs, draft_cost)
        over = round(tree["speedup"] / chain["speedup"], 3)
        flat = dict.fromkeys(costs, costs[1])  # what the same drafts would allow were verifying free
        over_flat = round(tree_bound(report["rank_shares"], flat, draft_cost)["speedup"]
                          / chain_bound(float(report["agreement"]), flat, draft_cost)["speedup"], 3)  # fmt: skip
        agreed[setting] = {**report, "chain_bound": chain, "tree_bound": tree, "tree_over_chain_bound": over,
                           "tree_over_chain_if_flat": over_flat, "trees": _trees(over, over_flat)}  # fmt: skip
        for b, line in by_batch.items():
            bound = chain_bound(float(report["agreement"]), line["verify_cost"], line["draft_cost"],
                                line["draft_first_cost"])  # fmt: skip
            agreed[setting][f"chain_bound_batch_{b}"] = {**bound, "says": _batch_words(b, bound, line["verify_cost"])}
    yield agreed
    yield from speculative_bench(data, replace(config, model=str(target_path), draft=str(draft_path)))
