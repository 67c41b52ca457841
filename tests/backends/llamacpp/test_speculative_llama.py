"""Speculative decoding in the engine, against the real llama.cpp and the shipped SmolLM2: lossless by test.

Speculative output must equal plain output token for token, whatever the drafts: real drafters, and scripted
ones that are always right, always wrong, right then wrong, or end the reply early; greedy and seeded sampling.

Exact where llama.cpp computes exactly: with flash attention, a call over several tokens of one sequence gives
each token the logits of a call over that token alone while the sequence holds at most 256 cells (beyond, a
lone token's attention is split across threads), so on short jobs the replies must be identical, no allowance.
On long jobs without flash attention (the default) a verify call rounds differently from a one-token call, by up
to ~1 logit; there a differing token is allowed only where plain decoding's own top-2 gap is under ``TIE_EPS``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from minions.backends.llamacpp.engine import Engine, EngineConfig
from minions.backends.llamacpp.quantize import default_local_model
from minions.backends.speculation import CostCurve, NullSpeculator, ScriptedDrafter
from minions.errors import ConfigError
from minions.evals.bench.engine import divergence_report
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

pytestmark = pytest.mark.slow

# The largest logit difference between a verify call and one-token calls seen on SmolLM2 Q4_0 (max over the
# vocabulary, at long contexts): a plain top-2 gap under it may flip.
TIE_EPS = 1.0
CHEAP = CostCurve.linear(0.05)  # verify tokens nearly free: the adaptive depth drafts a lot (the hard case)
SCHEMA = {
    "type": "object",
    "properties": {"explanation": {"type": "string"}, "citation": {"type": ["string", "null"]},
                   "answer": {"type": ["string", "null"]}},
    "required": ["explanation", "citation", "answer"],
}  # fmt: skip
EXCERPTS = (
    "Net sales were $32.8 billion in 2018, up 3.5 percent from 2017. Operating income was $7.2 billion. "
    "The company paid dividends of $3.2 billion and repurchased $4.9 billion of its stock.",
    "Risks include changes in foreign currency exchange rates, raw material prices, and the outcome of "
    "litigation related to PFAS. The company has operations in more than 70 countries.",
    "Cash provided by operating activities was $6.4 billion. Capital spending was $1.6 billion, and the "
    "company expects capital spending of $1.7 to $1.9 billion in 2019.",
)
QUESTIONS = ("What were net sales?", "Which risks are mentioned?")
REPORT = Path(__file__).resolve().parents[3] / "examples" / "northwind-annual-report-2025.md"


def _requests(excerpts: Sequence[str] = EXCERPTS, max_tokens: int = 48, **params: object) -> list[ChatRequest]:
    reqs = []
    for text in excerpts:
        for q in QUESTIONS:
            user = f"Excerpt:\n{text}\n\nInstruction: {q} Quote the excerpt."
            reqs.append(
                ChatRequest(
                    [Message("system", "Reply with one JSON object."), Message("user", user)],
                    SamplingParams(max_tokens=max_tokens, json_schema=SCHEMA, **params),
                )
            )  # type: ignore[arg-type]
        reqs.append(
            ChatRequest(
                [Message("user", f"{text}\n\nSummarize this in one sentence.")],
                SamplingParams(max_tokens=max_tokens, **params),
            )
        )  # type: ignore[arg-type]
    return reqs  # fmt: skip


def _engine(**config: object) -> Engine:
    settings: dict[str, object] = {"n_ctx": 2048, "seq_ctx": 1024, "max_seqs": 4, "learn_drafts": False}
    engine = Engine(default_local_model(), EngineConfig(**{**settings, **config}))  # type: ignore[arg-type]
    engine.speculator.cost = CHEAP
    engine.speculator.gate = None  # drafts as the table says, however the loaded machine's steps measure
    return engine


@pytest.fixture(scope="module")
def exact() -> Iterator[Engine]:
    engine = _engine(flash_attn=True)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def plain(exact: Engine) -> list[ChatResult]:
    return exact.run(_requests(), speculate=False, trace_tokens=True)


def _tokens(results: Sequence[ChatResult]) -> list[list[int]]:
    return [list(r.stats["token_ids"]) for r in results]


def assert_identical(plain: Sequence[ChatResult], spec: Sequence[ChatResult]) -> None:
    assert _tokens(spec) == _tokens(plain)
    assert [r.text for r in spec] == [r.text for r in plain]
    assert [r.finish_reason for r in spec] == [r.finish_reason for r in plain]


def assert_kv_in_step(engine: Engine) -> None:
    """Every sequence's KV memory holds exactly what its record says: rejected drafts were rolled back."""
    for slot in engine.lane.slots.slots:
        assert slot.job is None
        assert engine.lane.ctx.seq_pos_max(slot.seq) == len(slot.tokens) - 1


def test_greedy_speculative_equals_plain_greedy(exact: Engine, plain: list[ChatResult]) -> None:
    assert max(len(r.stats["prompt_ids"]) + len(r.stats["token_ids"]) for r in plain) <= 256
    for max_active in (1, 4):
        exact.speculator.reset()
        exact.clear_cache()
        spec = exact.run(_requests(), max_active=max_active, trace_tokens=True)
        assert_identical(plain, spec)
        batch = spec[0].stats["batch"]
        assert batch["accepted"] > 0 and batch["drafted"] > batch["accepted"]
        assert batch["verify_tokens"] > batch["decode_steps"]
        assert_kv_in_step(exact)
    for r in spec:  # stats in every result
        assert r.stats["drafted"] >= r.stats["accepted"]
        assert r.stats["verify_steps"] > 0 and r.stats["tokens_per_step"] >= 1.0
        assert set(r.stats["acceptance_by_drafter"]) <= {"context", "trace", "grammar"}
    assert sum(r.stats["tokens_per_step"] > 1.0 for r in spec) >= len(spec) // 2


def _script(plain: Sequence[ChatResult], how: str, eos: int) -> ScriptedDrafter:
    replies = {tuple(r.stats["prompt_ids"]): list(r.stats["token_ids"]) for r in plain}

    def script(seq: int, tokens: Sequence[int], k: int) -> list[int]:
        prompt = next(p for p in replies if tuple(tokens[: len(p)]) == p)
        done = len(tokens) - len(prompt)
        right = replies[prompt][done : done + k]  # tokens[-1] is the last emitted: draft what follows
        wrong = [(t + 1) % 49152 for t in right]
        if how == "right":
            return right  # ends with the end-of-generation token where the reply does
        if how == "wrong":
            return wrong
        if how == "right-then-wrong":
            return right[: len(right) // 2] + wrong[len(right) // 2 :]
        return [*right[:1], eos, *right[1:]]  # "early-eos": an end of generation the target does not want

    return ScriptedDrafter(script)


@pytest.mark.parametrize("how", ["right", "wrong", "right-then-wrong", "early-eos"])
def test_scripted_drafts_reproduce_plain_output(exact: Engine, plain: list[ChatResult], how: str) -> None:
    drafters = exact.speculator.drafters
    exact.speculator.drafters = [_script(plain, how, int(exact.model.lib.llama_vocab_eos(exact.model.vocab)))]
    exact.speculator.depth = 4
    try:
        exact.clear_cache()
        spec = exact.run(_requests(), trace_tokens=True)
    finally:
        exact.speculator.drafters, exact.speculator.depth = drafters, None
    assert_identical(plain, spec)
    assert_kv_in_step(exact)
    batch = spec[0].stats["batch"]
    if how == "right":
        assert batch["accepted"] == batch["drafted"] > 0
        assert batch["decode_steps"] < sum(len(r.stats["token_ids"]) for r in plain) / 3
    if how == "wrong":
        assert batch["accepted"] == 0 and batch["drafted"] > 0
    if how == "right-then-wrong":
        assert 0 < batch["accepted"] < batch["drafted"]


def test_seeded_sampling_is_unchanged_by_speculation(exact: Engine) -> None:
    """Sample-and-compare draws once per emitted token, in plain decoding's order: same seed, same reply."""
    reqs = _requests(max_tokens=32, temperature=0.8, seed=11)
    exact.clear_cache()
    plain = exact.run(reqs, speculate=False, trace_tokens=True)
    exact.speculator.reset()
    exact.clear_cache()
    spec = exact.run(reqs, trace_tokens=True)
    assert_identical(plain, spec)
    assert spec[0].stats["batch"]["drafted"] > 0


def test_long_jobs_differ_only_at_near_ties() -> None:
    """The default engine (no flash attention) on jobs of ~700 prompt tokens: replies equal plain decoding's
    except where plain's own top-2 gap is within the verify call's rounding."""
    excerpt = REPORT.read_text()[:2500]
    reqs = _requests([excerpt], max_tokens=64)
    engine = _engine()
    try:
        plain = engine.run(reqs, speculate=False, trace_tokens=True)
        ref = _tokens(plain)
        for max_active in (1, 3):
            engine.clear_cache()
            spec = engine.run(reqs, max_active=max_active, trace_tokens=True)
            report = divergence_report(
                list(zip(ref, _tokens(spec), strict=True)),
                lambda i, k: engine.logits_after([*plain[i].stats["prompt_ids"], *ref[i][:k]]),
                TIE_EPS,
            )
            assert report["mismatches"] == 0, report
            assert spec[0].stats["batch"]["accepted"] > 0
            assert_kv_in_step(engine)
    finally:
        engine.close()


def test_an_expensive_machine_drafts_nothing() -> None:
    """When a verify call costs a full step per token (T(n) = n T(1)), no draft can pay: the adaptive depth
    chooses plain decoding every step."""
    engine = _engine()
    engine.speculator.cost = CostCurve.linear(1.0)
    try:
        results = engine.run(_requests()[:3], trace_tokens=True)
    finally:
        engine.close()
    batch = results[0].stats["batch"]
    assert batch["drafted"] == 0 and set(batch["depths"]) == {0}
    assert all(r.stats["tokens_per_step"] == 1.0 for r in results)


def test_speculation_needs_an_engine_made_for_it() -> None:
    engine = Engine(default_local_model(), EngineConfig(n_ctx=1024, seq_ctx=512, max_seqs=1, speculate=False))
    try:
        assert isinstance(engine.speculator, NullSpeculator)  # it never drafts
        with pytest.raises(ConfigError, match="speculate=True"):
            engine.run(_requests()[:1], speculate=True)
    finally:
        engine.close()


@pytest.mark.parametrize("params", [{}, {"temperature": 0.8, "seed": 5}], ids=["greedy", "seeded-sampling"])
def test_a_draft_model_keeps_the_reply_of_plain_decoding(smollm2_gguf: Path, params: dict[str, object]) -> None:
    """A real draft model (``EngineConfig(draft_model=...)``): the shipped Q4_1 SmolLM2 drafting for its Q4_0
    quantization, the only drafter, so its drafts are mostly right and sometimes not."""
    engine = _engine(flash_attn=True, draft_model=str(smollm2_gguf))
    try:
        drafter = engine.speculator.drafters[-1]
        assert drafter.name == "draft_model"
        engine.speculator.drafters, engine.speculator.depth = [drafter], 4
        requests = _requests(max_tokens=24, **params)[:3]  # two extraction jobs and a summary
        plain = engine.run(requests, speculate=False, trace_tokens=True)
        engine.clear_cache()  # both runs compute their prompts: a restored prefix may round a logit differently
        spec = engine.run(requests, trace_tokens=True)
        assert_identical(plain, spec)
        assert_kv_in_step(engine)
        drafted = sum(r.stats["drafted_by_drafter"].get("draft_model", 0) for r in spec)
        batch = spec[0].stats["batch"]
        assert drafted == batch["drafted"] > 0 and 0 < batch["accepted"] < batch["drafted"]
    finally:
        engine.close()


def test_a_draft_model_computes_each_prompt_with_the_target(smollm2_gguf: Path) -> None:
    """The draft model computes a job's prompt in the step that finishes the target's (``Speculator.prefill``),
    so its first decode step only drafts; a run that does not speculate leaves it alone."""
    engine = _engine(draft_model=str(smollm2_gguf))
    try:
        drafter = engine.speculator.drafters[-1]
        request = _requests(max_tokens=4)[:1]
        engine.run(request, speculate=False, trace_tokens=True)
        assert drafter.computed == 0
        engine.clear_cache()
        seen, steps = [], engine.steps(request, trace_tokens=True)
        try:
            while True:
                next(steps)
                seen.append(drafter.computed)
        except StopIteration as end:
            prompt = end.value[0].stats["prompt_ids"]
            seen.append(drafter.computed)  # a right draft may end the reply in its first decode step
        assert len(prompt) - 1 in seen  # after the prompt's last step, before any draft: all but the last token
        assert seen[0] in (0, len(prompt) - 1) and max(seen) > len(prompt) - 1  # then it drafted
    finally:
        engine.close()


def test_a_draft_model_drafts_every_sequence_in_one_call_a_position(smollm2_gguf: Path) -> None:
    """``DraftModel.propose_many``: the drafts of three sequences, each its own length, are what each gets alone,
    in one decode call a position (the first computes their prompts too), and each call is timed."""
    from minions.backends.llamacpp.draft_model import DraftModel

    prompts = [[1, 504, 3058, 282, 260, 2365, 30], [1, 1206, 314, 253, 1363, 28], [1, 504, 3058, 282, 7421, 30, 216]]
    lengths = [5, 2, 8]
    alone = DraftModel(smollm2_gguf, n_seqs=3, seq_ctx=256, n_threads=2)
    together = DraftModel(smollm2_gguf, n_seqs=3, seq_ctx=256, n_threads=2)
    try:
        single = [alone.propose(seq, p, k) for seq, (p, k) in enumerate(zip(prompts, lengths, strict=True))]
        calls = together.calls
        batched = together.propose_many([(seq, p, k) for seq, (p, k) in enumerate(zip(prompts, lengths, strict=True))])
        assert batched == single
        assert [len(d) for d in batched] == lengths  # none of these hits the end of generation so soon
        # one call a position for all (the first computes the prompts too): not sum(lengths)
        assert together.calls - calls == max(lengths)
        assert together.draft_seconds(3) > 0 and together.draft_seconds(1) > 0  # 3 and 1 sequences were timed
        # the next step computes only what is new: the accepted tokens, the pending one, then its drafts
        accepted = [[*p, *d[:1]] for p, d in zip(prompts, batched, strict=True)]
        computed = together.computed
        again = together.propose_many([(seq, p, 1) for seq, p in enumerate(accepted)])
        assert together.computed - computed == 3  # each sequence's pending token (its drafts' cells are reused)
        assert again == [d[1:2] for d in batched]
    finally:
        alone.close()
        together.close()


def test_a_draft_model_takes_a_shared_prompt_from_another_sequence(smollm2_gguf: Path) -> None:
    """Two jobs over one excerpt: the second prompt's shared start is copied from the first sequence's stream, not
    computed again (``DraftModel._share``), and its drafts are what a draft model that computed it all gives."""
    from minions.backends.llamacpp.draft_model import DraftModel

    excerpt = [1, *([504, 3058, 282, 260, 2365, 30, 1206, 314, 253, 1363, 28] * 6)]
    first, second = [*excerpt, 7421, 30, 216], [*excerpt, 2365, 28, 253, 216]
    fresh = DraftModel(smollm2_gguf, n_seqs=2, seq_ctx=256, n_threads=2)
    shared = DraftModel(smollm2_gguf, n_seqs=2, seq_ctx=256, n_threads=2)
    try:
        expected = fresh.propose(1, second, 6)
        shared.prefill(0, first)
        computed = shared.computed
        shared.prefill(1, second)
        assert shared.shared == len(excerpt)
        assert shared.computed - computed == len(second) - 1 - len(excerpt)  # the question, less its last token
        assert shared.propose_many([(0, first, 3), (1, second, 6)])[1] == expected
        shared.prefill(1, second[:10])  # a short prompt shares too little to copy: it keeps its own stream
        assert shared.shared == len(excerpt)
    finally:
        fresh.close()
        shared.close()


def test_a_draft_model_drafts_what_the_jobs_grammar_allows(smollm2_gguf: Path) -> None:
    """A job with a JSON schema emits only what its grammar allows, so a draft model drafts under a copy of the
    job's parse state (``Drafter.constrained``): after the assistant header, where SmolLM2 alone writes prose, the
    draft opens the JSON object as the job must. Drafting leaves the job's own parse state where it was."""
    from minions.backends.llamacpp.draft_model import DraftModel
    from minions.backends.llamacpp.sampling import GrammarCache, GrammarState

    draft = DraftModel(smollm2_gguf, n_seqs=2, seq_ctx=512, n_threads=2)
    grammars = GrammarCache(draft.model)
    state = GrammarState(draft.model, grammars.new_sampler(SCHEMA))
    try:
        prompt = draft.model.chat_tokens(_requests()[0].messages)
        free = draft.model.detokenize(draft.propose(0, prompt, 8)).decode()
        draft.start(1, "schema", state)
        constrained = draft.model.detokenize(draft.propose(1, prompt, 8)).decode()
        assert constrained.replace(" ", "").startswith('{"explanation":')
        assert not free.lstrip().startswith("{")  # unconstrained, the draft was prose: the case this is for
        assert draft.model.detokenize(draft.propose(1, prompt, 8)).decode() == constrained  # the job's state stays
        draft.finish(1, prompt, len(prompt))
        assert draft.model.detokenize(draft.propose(1, prompt, 8)).decode() == free  # the job ended: no grammar
    finally:
        state.close()
        grammars.close()
        draft.close()
