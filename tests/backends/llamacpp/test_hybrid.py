"""Hybrid models (recurrent layers beside attention) in the engine, on real llama.cpp with tiny random-weight
models: one recurrent state per sequence, prefix sharing by copying a state at the prefix's end, speculation that
rolls back by restoring a checkpoint. Every mode must give the replies of plain decoding token for token: batched
and shared equal one at a time (the tiny models' matrices are Q8_0, so a batched token computes what it computes
alone); speculative equals plain with flash attention on, where a verify call over several tokens computes each
as a call over that token alone would (see ``test_speculative_llama``), so no near-tie allowance is needed. The
rollback's checkpoint and restore, and the recomputed tokens, are exact in both architectures.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from minions.backends.llamacpp.cost_table import measure_cost_table
from minions.backends.llamacpp.engine import Engine, EngineConfig
from minions.backends.llamacpp.ffi import LlamaContext, LlamaModel, TokenBatch
from minions.backends.speculation import CostCurve, ScriptedDrafter
from minions.backends.speculation.depth import CallCost, choose_depths, rollback_tokens
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

pytestmark = pytest.mark.slow

ARCHS = ("lfm2", "granitehybrid")
EXCERPT = "Net sales were $32.8 billion in 2018, up 3.5 percent from 2017. Operating income was $7.2 billion. "
QUESTIONS = ("What were net sales?", "Which risks are named?", "What was operating income?")


def _requests(max_tokens: int = 32) -> list[ChatRequest]:
    """Jobs over one excerpt (a shared prefix), greedy and seeded-sampled, each prompt different."""
    reqs = []
    for i, q in enumerate(QUESTIONS):
        for params in ({}, {"temperature": 0.8, "seed": 7 + i}):
            tag = "Quote it." if params else "Answer briefly."
            messages = [Message("system", "Reply."), Message("user", f"Excerpt:\n{EXCERPT * 3}\n\nQ: {q} {tag}")]
            reqs.append(ChatRequest(messages, SamplingParams(max_tokens=max_tokens, **params)))  # type: ignore[arg-type]
    return reqs


def _ids(results: Sequence[ChatResult]) -> list[list[int]]:
    assert all(r.ok for r in results), [r.error for r in results]
    return [list(r.stats["token_ids"]) for r in results]


def _engine(path: Path, **config: object) -> Engine:
    settings: dict[str, object] = {"n_ctx": 1024, "seq_ctx": 512, "max_seqs": 4, "learn_drafts": False}
    engine = Engine(path, EngineConfig(**{**settings, **config}))  # type: ignore[arg-type]
    if engine.config.speculate:
        engine.speculator.cost = CostCurve.linear(0.05)  # verify tokens nearly free: drafts whenever offered
    return engine


@pytest.fixture(scope="module", params=ARCHS)
def hybrid(request: pytest.FixtureRequest, tiny_models: dict[str, Path]) -> Iterator[Engine]:
    engine = _engine(tiny_models[request.param])
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def exact(hybrid: Engine) -> Iterator[Engine]:
    # no prefix sharing: which job copies which prefix depends on when jobs finish, which speculation changes,
    # and with flash attention a prompt computed from a copied prefix rounds otherwise than computed whole
    engine = _engine(hybrid.model.path, flash_attn=True, share_prefixes=False)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def plain(exact: Engine) -> list[list[int]]:
    """The reference of speculation: plain decoding, batched, on the flash-attention engine."""
    exact.clear_cache()
    return _ids(exact.run(_requests(), speculate=False, trace_tokens=True))


@pytest.fixture(scope="module")
def alone(hybrid: Engine) -> list[list[int]]:
    """The reference: plain decoding, one job at a time, nothing shared."""
    out = []
    for request in _requests():
        hybrid.clear_cache()
        out += _ids(hybrid.run([request], speculate=False, trace_tokens=True))
    return out


def test_the_tiny_models_load_as_hybrids_and_their_replies_vary(tiny_models: dict[str, Path]) -> None:
    for arch in ARCHS:
        model = LlamaModel(tiny_models[arch])
        try:
            assert model.memory == "hybrid" and model.n_vocab == 49152
        finally:
            model.close()


def test_a_hybrid_memory_cannot_drop_a_sequence_tail_but_the_engine_never_asks(hybrid: Engine) -> None:
    ctx, batch = hybrid.lane.ctx, hybrid.lane.batch
    hybrid.clear_cache()
    batch.clear()
    batch.add(list(range(100, 140)), 0, 0, logits_last=True)
    assert ctx.decode(batch) == 0
    assert not ctx.seq_rm(0, 37, -1) and ctx.seq_pos_max(0) == 39  # a partial removal fails, changing nothing
    state = ctx.recurrent_state(0)
    batch.clear()
    batch.add([5, 6, 7], 40, 0, logits_last=True)
    assert ctx.decode(batch) == 0
    ctx.restore_recurrent_state(0, state)  # back to position 39, and then the attention cells can go
    assert ctx.seq_rm(0, 40, -1) and ctx.seq_pos_max(0) == 39
    assert ctx.seq_rm(0) and ctx.seq_pos_max(0) == -1


def test_batched_replies_equal_one_at_a_time(hybrid: Engine, alone: list[list[int]]) -> None:
    hybrid.clear_cache()
    results = hybrid.run(_requests(), speculate=False, trace_tokens=True)
    assert _ids(results) == alone
    assert results[0].stats["batch"]["peak_seqs"] == 4  # four jobs in flight: batched indeed
    assert len({tuple(t) for t in alone}) == len(alone) and all(len(set(t)) > 4 for t in alone)  # replies vary


def test_prefix_sharing_copies_states_and_equals_no_sharing(hybrid: Engine, alone: list[list[int]]) -> None:
    hybrid.clear_cache()
    results = hybrid.run(_requests(), speculate=False, trace_tokens=True)
    batch = results[0].stats["batch"]
    assert _ids(results) == alone
    # the jobs over the excerpt waited for the first to compute it, then copied its state at the excerpt's end
    assert batch["stream_copies"] >= 3 and batch["prefill_reused"] > 3 * 100


def test_a_finished_prompt_is_not_offered_as_a_prefix_of_another(hybrid: Engine, alone: list[list[int]]) -> None:
    # after a run, sequences hold prompt and reply: a recurrent state past the prompt cannot serve it again
    hybrid.clear_cache()
    hybrid.run(_requests()[:1], speculate=False)
    again = hybrid.run(_requests()[:1], speculate=False, trace_tokens=True)
    assert _ids(again) == alone[:1] and again[0].stats["prefill_reused"] == 0


def _script(reference: Sequence[Sequence[int]], prompts: Sequence[Sequence[int]], how: str) -> ScriptedDrafter:
    replies = {tuple(p): list(r) for p, r in zip(prompts, reference, strict=True)}

    def script(seq: int, tokens: Sequence[int], k: int) -> list[int]:
        prompt = next(p for p in replies if tuple(tokens[: len(p)]) == p)
        done = len(tokens) - len(prompt)
        right = replies[prompt][done : done + k]
        wrong = [(t + 1) % 49152 for t in right]
        if how == "right":
            return right
        if how == "wrong":
            return wrong
        half = max(1, min(len(right), 4) // 2)  # of the 4 tokens verified, the first half is right
        return right[:half] + wrong[half:]

    return ScriptedDrafter(script)


@pytest.mark.parametrize("how", ["right", "wrong", "right-then-wrong"])
def test_speculation_rolls_back_recurrent_state_and_equals_plain(
    exact: Engine, plain: list[list[int]], how: str
) -> None:
    prompts = [exact.tokens(r.messages) for r in _requests()]
    drafters, exact.speculator.drafters = exact.speculator.drafters, [_script(plain, prompts, how)]
    exact.speculator.depth = 4
    try:
        exact.clear_cache()
        results = exact.run(_requests(), trace_tokens=True)
    finally:
        exact.speculator.drafters, exact.speculator.depth = drafters, None
    batch = results[0].stats["batch"]
    assert _ids(results) == plain
    assert batch["drafted"] > 50
    if how == "right":
        assert batch["accepted"] == batch["drafted"] and batch["rollbacks"] == 0
    else:  # every rejected draft went back to its checkpoint and computed the accepted tokens again
        assert batch["rollbacks"] > 20 and batch["redo_tokens"] >= batch["rollbacks"]
        assert (batch["accepted"] == 0) == (how == "wrong")


def test_speculation_with_the_real_drafters_equals_plain(exact: Engine, plain: list[list[int]]) -> None:
    exact.clear_cache()
    results = exact.run(_requests(), trace_tokens=True)
    assert _ids(results) == plain


def test_the_cost_table_of_a_hybrid_measures_its_rollback(tiny_models: dict[str, Path]) -> None:
    model = LlamaModel(tiny_models["lfm2"])
    try:
        table = measure_cost_table(model, n_threads=1, max_seqs=2, context=64, repeats=1)
        assert table.rollback_s > 0 and all(c(2) > 0 for c in table.curves)
        # the context it measured in is gone, and a fresh one decodes: nothing was left inconsistent
        ctx = LlamaContext(model, seq_ctx=128, n_seq_max=1, n_batch=64, n_threads=1)
        batch = TokenBatch(model.lib, 64)
        batch.add([1, 2, 3], 0, 0, logits_last=True)
        assert ctx.decode(batch) == 0
        ctx.close()
    finally:
        model.close()


def test_rollback_costs_keep_drafting_from_making_a_recurrent_model_slower() -> None:
    flat = CallCost(CostCurve.linear(0.1))  # each verify token costs a tenth of a call
    # an attention model drafts at acceptance 0.3 here; a recurrent one does not, paying for the redone tokens
    assert choose_depths([0.3], [4], flat) != [0]
    assert choose_depths([0.3], [4], flat, rollback_s=0.2) == [0]
    # a good drafter pays even with rollbacks; a draft that is always right never rolls back
    assert choose_depths([0.9], [4], flat, rollback_s=0.2)[0] > 0
    assert rollback_tokens(1.0, 4) == 0.0 and rollback_tokens(0.0, 4) == 1.0
    assert rollback_tokens(0.5, 2) == pytest.approx(0.5 * 1 + 0.25 * 2)


@pytest.mark.parametrize("target, draft", [("lfm2", "smollm2"), ("smollm2", "lfm2"), ("granitehybrid", "lfm2")])
def test_a_draft_model_of_either_memory_keeps_the_target_lossless(
    tiny_models: dict[str, Path], smollm2_gguf: Path, target: str, draft: str
) -> None:
    # an attention draft for a hybrid target, a hybrid draft (which rolls back by checkpoint) for either
    paths = {**tiny_models, "smollm2": smollm2_gguf}
    engine = _engine(paths[target], flash_attn=True, share_prefixes=False, draft_model=str(paths[draft]), k_max=3)
    try:
        drafter = engine.speculator.drafters[-1]
        engine.speculator.drafters, engine.speculator.depth = [drafter], 3
        requests = _requests(max_tokens=10)[:2]
        plain = _ids(engine.run(requests, speculate=False, trace_tokens=True))
        results = engine.run(requests, trace_tokens=True)
        assert _ids(results) == plain and results[0].stats["batch"]["drafted"] > 5
    finally:
        engine.close()
