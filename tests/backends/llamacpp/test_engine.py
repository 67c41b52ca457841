"""The batching engine against the real llama.cpp and the shipped SmolLM2 (Q4_0), and against the high-level
``Llama.create_chat_completion`` run one job at a time: the replies must be the same."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.llamacpp.engine import Engine, EngineConfig
from minions.backends.llamacpp.quantize import default_local_model
from minions.errors import ContextLengthError
from minions.evals.bench.engine import BaselineReply, compare_replies, one_at_a_time
from minions.events import CancelToken
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

pytestmark = pytest.mark.slow

N_CTX = 1024
SEQ_CTX = 512
# Logit gap under which two tokens count as tied. The engine is exact by construction (per-sequence KV streams,
# chunking like Llama.eval), so this only guards against a llama.cpp that is not.
TIE_EPS = 1e-3

ANSWER = {
    "type": "object",
    "properties": {"answer": {"enum": ["yes", "no"]}, "confidence": {"type": "integer"}},
    "required": ["answer", "confidence"],
}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "big": {"type": "boolean"}},
    "required": ["city", "big"],
}
SYSTEM = (
    "You are a careful analyst. You read excerpts of annual reports and answer questions about them briefly, "
    "quoting the excerpt where you can. If the excerpt does not say, you say so. Figures are in millions of "
    "dollars unless the excerpt says otherwise. Keep every answer under two sentences."
)


@pytest.fixture(scope="module")
def model_path() -> Path:
    return default_local_model()


@pytest.fixture(scope="module")
def engine(model_path: Path) -> Iterator[Engine]:
    engine = Engine(model_path, EngineConfig(n_ctx=N_CTX, seq_ctx=SEQ_CTX, max_seqs=4, speculate=False))
    yield engine
    engine.close()


def ask(question: str, *, schema: dict | None = None, max_tokens: int = 16, system: str = SYSTEM) -> ChatRequest:
    return ChatRequest([Message("system", system), Message("user", question)],
                       SamplingParams(max_tokens=max_tokens, json_schema=schema))  # fmt: skip


def assert_same_as_alone(engine: Engine, base: list[BaselineReply], results: list[ChatResult]) -> None:
    report = compare_replies(engine, base, results, TIE_EPS)
    assert report["mismatches"] == 0, report
    for ref, got in zip(base, results, strict=True):
        if list(got.stats["token_ids"]) == ref.tokens:
            assert got.text == ref.text


def test_batched_replies_equal_one_at_a_time(engine: Engine, model_path: Path) -> None:
    requests = [
        ask("Did 3M's sales grow in 2018? Net sales rose 3.5% to $32.8 billion.", schema=ANSWER, max_tokens=24),
        ask("Name a large city in Europe.", schema=CITY, max_tokens=24),
        ask("What does a balance sheet show?"),
        ask("What is free cash flow?", max_tokens=20),
        ask("Say hello.", system="You are terse."),
        # larger than a batched sequence (512 cells): it runs alone, in a context of N_CTX cells
        ask("Summarize: " + "Revenue grew while costs fell. " * 70, max_tokens=8),
    ]
    streamed: dict[int, str] = {}
    finished: dict[int, ChatResult] = {}

    def on_token(i: int, text: str) -> None:
        streamed[i] = streamed.get(i, "") + text

    results = engine.run(requests, on_token=on_token, on_result=finished.__setitem__, trace_tokens=True)
    base = one_at_a_time(model_path, requests, n_ctx=N_CTX)

    assert_same_as_alone(engine, base, results)
    assert [r.text for r in results] == [b.text for b in base]  # exact, not only within the tie rule
    assert all(streamed.get(i, "") == r.text for i, r in enumerate(results))
    assert sorted(finished) == list(range(len(requests)))
    batch = results[0].stats["batch"]
    assert batch["jobs"] == len(requests) and batch["failed"] == 0
    assert 1 < batch["peak_seqs"] <= 4  # they ran together, at most max_seqs at once (the others waited)
    assert sum(r.usage.completion_tokens for r in results) == batch["decode_tokens"]


@pytest.mark.parametrize("prefill_first", [True, False])
def test_a_batch_decodes_together_once_its_prompts_are_in(model_path: Path, prefill_first: bool) -> None:
    questions = ("What is revenue?", "Name three colours.", "What does EBITDA stand for?", "Define a dividend.")
    engine = Engine(model_path, EngineConfig(max_seqs=4, speculate=False, prefill_first=prefill_first))
    order: list[int] = []
    try:
        results = engine.run([ask(q, system="Be brief.") for q in questions], on_token=lambda i, _: order.append(i))
    finally:
        engine.close()
    assert all(len(r.text) > 10 for r in results)
    last_start = max(order.index(i) for i in range(len(questions)))  # the last job's first token: prompts all in
    before = [order[: last_start + 1].count(i) for i in range(len(questions))]
    if prefill_first:
        assert max(before) == 1  # each job's first token only: no decode step ran before
    else:
        assert max(before) > 1  # the first jobs were generating while the later prompts were computed


def test_seeded_sampling_equals_the_high_level_api(engine: Engine, model_path: Path) -> None:
    from minions.backends.llamacpp import import_llama_cpp

    params = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=16, seed=7)
    requests = [
        ChatRequest([Message("user", "Invent a name for a river.")], params),
        ChatRequest([Message("user", "Invent a name for a river.")], params.with_(seed=8)),
        ChatRequest([Message("user", "Describe a city as JSON.")], params.with_(json_schema=CITY, max_tokens=30)),
        ChatRequest([Message("user", "Invent a name for a river.")], params),
    ]
    results = engine.run(requests)
    llm = import_llama_cpp().Llama(model_path=str(model_path), n_ctx=N_CTX, n_batch=512, verbose=False)
    for req, got in zip(requests, results, strict=True):
        p, schema = req.params, req.params.json_schema
        llm.reset()
        ref = llm.create_chat_completion(
            messages=[m.to_dict() for m in req.messages], temperature=p.temperature, top_p=p.top_p,
            max_tokens=p.max_tokens, seed=p.seed,
            response_format={"type": "json_object", "schema": schema} if schema else None,
        )  # fmt: skip
        assert got.text == ref["choices"][0]["message"]["content"]
    assert results[0].text == results[3].text  # same seed, same reply
    llm.close()


def test_prefix_reuse_skips_prefill(engine: Engine) -> None:
    engine.clear_cache()
    questions = ["What is revenue?", "What is a dividend?", "What is goodwill?"]
    results = engine.run([ask(q, max_tokens=4) for q in questions], trace_tokens=True)
    prompts = [r.stats["prompt_ids"] for r in results]
    shared = next(i for i, column in enumerate(zip(*prompts, strict=False)) if len(set(column)) > 1)
    assert shared > 50  # the system prompt and the template's headers
    batch = results[0].stats["batch"]
    total = sum(len(p) for p in prompts)
    # the shared prefix is computed once: the other two jobs copy it
    assert batch["prefill_reused"] >= 2 * (shared - 2)
    assert batch["prefill_computed"] == total - batch["prefill_reused"]
    assert batch["prefill_computed"] <= total - 2 * (shared - 2)

    # a later call finds the prefix in the cache: only the new question is computed
    again = engine.run([ask("What is an asset?", max_tokens=4)])[0]
    assert again.usage.cached_prompt_tokens >= shared - 2
    assert again.stats["prefill_computed"] <= again.usage.prompt_tokens - (shared - 2)
    assert engine.stats.prefill_reused >= batch["prefill_reused"] + shared - 2


def test_grammars_hold_for_every_sequence_in_a_mixed_batch(engine: Engine) -> None:
    requests = [
        ask("Is the sky blue?", schema=ANSWER, max_tokens=40),
        ask("Name the capital of Italy.", schema=CITY, max_tokens=40),
        ask("Tell me about rivers.", max_tokens=12),
        ask("Is water wet?", schema=ANSWER, max_tokens=40),
        ask("Name a city in Asia.", schema=CITY, max_tokens=40),
        ask("Write one word.", max_tokens=12),
    ]
    results = engine.run(requests)
    for req, result in zip(requests, results, strict=True):
        assert result.ok, result.error
        if req.params.json_schema is ANSWER:
            assert result.finish_reason == "stop"
            data = json.loads(result.text)
            assert data["answer"] in ("yes", "no") and isinstance(data["confidence"], int)
        elif req.params.json_schema is CITY:
            assert result.finish_reason == "stop"
            data = json.loads(result.text)
            assert isinstance(data["city"], str) and isinstance(data["big"], bool)
        else:
            assert result.text and not result.text.lstrip().startswith("{")


def test_a_too_long_prompt_fails_alone(engine: Engine) -> None:
    good = [ask("What is revenue?", max_tokens=8), ask("What is profit?", max_tokens=8)]
    alone = engine.run(good)
    too_long = ask("word " * 1500)
    results = engine.run([good[0], too_long, good[1]])
    assert results[1].finish_reason == "error" and not results[1].ok
    assert "smaller chunks" in (results[1].error or "") and "ContextLengthError" in (results[1].error or "")
    assert isinstance(results[1].exception, ContextLengthError)
    assert [results[0].text, results[2].text] == [r.text for r in alone]
    assert results[0].stats["batch"]["failed"] == 1


def test_cancellation_frees_the_kv_memory(engine: Engine, model_path: Path) -> None:
    engine.clear_cache()
    cancel = CancelToken()
    seen: list[int] = []

    def on_token(i: int, text: str) -> None:
        seen.append(i)
        if len(seen) >= 6:
            cancel.cancel()

    requests = [ask(f"Write a long story about the number {n}.", max_tokens=200) for n in range(6)]
    results = engine.run(requests, on_token=on_token, cancel=cancel)
    cancelled = [r for r in results if r.finish_reason == "cancelled"]
    assert len(cancelled) >= 4 and results[0].stats["batch"]["cancelled"] == len(cancelled)
    # nothing is left of the cancelled jobs, in our books and in llama.cpp's: only finished prompts stay cached
    kept = sum(r.usage.prompt_tokens for r in results if r.finish_reason != "cancelled")
    assert engine.stats.cells_used == kept
    lane = engine.lane
    for slot in lane.slots.slots:
        assert slot.job is None and lane.ctx.seq_pos_max(slot.seq) == len(slot.tokens) - 1

    # the engine is intact: the next run gives the one-at-a-time replies
    follow = [ask("What is a bond?", max_tokens=8), ask("What is equity?", max_tokens=8)]
    results = engine.run(follow, trace_tokens=True)
    assert_same_as_alone(engine, one_at_a_time(model_path, follow, n_ctx=N_CTX), results)


def test_a_raising_callback_leaves_the_engine_clean(engine: Engine) -> None:
    def on_token(i: int, text: str) -> None:
        raise RuntimeError("renderer bug")

    with pytest.raises(RuntimeError, match="renderer bug"):
        engine.run([ask("What is revenue?"), ask("What is profit?")], on_token=on_token)
    for slot in engine.lane.slots.slots:
        assert slot.job is None and engine.lane.ctx.seq_pos_max(slot.seq) == len(slot.tokens) - 1
    assert all(r.ok for r in engine.run([ask("What is revenue?", max_tokens=4)]))


def test_steps_make_the_run_a_step_at_a_time_and_closing_them_ends_it_cleanly(engine: Engine, model_path: Path) -> None:
    requests = [ask("What is revenue?", max_tokens=6), ask("What is profit?", max_tokens=6)]
    steps = engine.steps(requests, trace_tokens=True)
    taken = 0
    while True:
        try:
            next(steps)
            taken += 1
        except StopIteration as done:
            results = done.value
            break
    assert taken >= 6  # a prompt step, then a step per token
    assert_same_as_alone(engine, one_at_a_time(model_path, requests, n_ctx=N_CTX), results)

    steps = engine.steps([ask(f"Write a long story about {n}.", max_tokens=100) for n in range(3)])
    for _ in range(8):
        next(steps)
    steps.close()  # the caller stops driving it: its jobs go, and their sequences with them
    for slot in engine.lane.slots.slots:
        assert slot.job is None and engine.lane.ctx.seq_pos_max(slot.seq) == len(slot.tokens) - 1
    assert all(r.ok for r in engine.run([ask("What is revenue?", max_tokens=4)]))


def test_kv_books_match_llama_cpp_after_runs(engine: Engine) -> None:
    engine.run([ask(q, max_tokens=6) for q in ("One?", "Two?", "Three?", "Four?", "Five?")])
    for slot in engine.lane.slots.slots:
        assert engine.lane.ctx.seq_pos_max(slot.seq) == len(slot.tokens) - 1


def test_the_backend_batches_through_the_engine() -> None:
    backend = LlamaCppBackend(n_ctx=N_CTX, max_seqs=3)
    tokens: list[tuple[int, str]] = []
    requests = [ask("What is revenue?", max_tokens=6), ask("What is cash?", max_tokens=6)]
    results = backend.batch(requests, on_token=lambda i, t: tokens.append((i, t)))
    assert all(r.ok for r in results) and {i for i, _ in tokens} == {0, 1}
    assert results[0].stats["batch"]["jobs"] == 2
    assert backend.chat(requests[0].messages, requests[0].params).text == results[0].text
    backend.close()


def test_logprobs_report_the_distribution_the_reply_was_sampled_from(engine: Engine):
    request = ChatRequest([Message("user", "Is Paris in France? Reply yes or no.")],
                          SamplingParams(max_tokens=3, logprobs=5))  # fmt: skip
    result = engine.run([request])[0]
    steps = result.stats["logprobs"]
    assert len(steps) == result.usage.completion_tokens or len(steps) == result.usage.completion_tokens + 1
    for step in steps:
        values = [lp for _, lp in step]
        assert len(step) == 5 and values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        assert sum(math.exp(v) for v in values) <= 1 + 1e-6
    # greedy: each token of the reply is the most likely one reported at its step
    assert result.text.startswith(steps[0][0][0].strip()) or result.text.startswith(steps[0][0][0])
    plain = engine.run([ChatRequest(request.messages, SamplingParams(max_tokens=3))])[0]
    assert plain.text == result.text and "logprobs" not in plain.stats


def test_a_last_assistant_message_is_the_start_of_the_reply(engine: Engine):
    question = Message("user", "Which city is the capital of France?")
    started = [question, Message("assistant", "The capital of France is")]
    prompt = engine.model.render_chat(started)
    assert prompt == engine.model.render_chat([question]) + "The capital of France is"  # not closed, no new turn
    result = engine.run([ChatRequest(started, SamplingParams(max_tokens=4, logprobs=5))])[0]
    assert result.text.strip().startswith("Paris")
    assert result.stats["logprobs"][0][0][0] == " Paris"  # the reply's text, its space included


def test_a_reply_that_loops_is_cut_and_marked(engine: Engine):
    request = ChatRequest([Message("user", "Write the number 7 one hundred times: 7 7 7 7 7 7 7 7 7 7")],
                          SamplingParams(max_tokens=200))  # fmt: skip
    result = engine.run([request])[0]
    assert result.stats.get("looping", 0) >= 1, result.text  # SmolLM2 writes "7 7 7 ..." without end
    assert result.usage.completion_tokens < 40 and result.finish_reason == "length"
    assert result.text.split()[:5] == ["7"] * 5


def test_a_job_that_ends_first_leaves_no_gap_in_the_calls(model_path: Path) -> None:
    """A job of four ends first, on sequence 1: its free sequence, between the others, carries fillers in the
    later calls, so that llama.cpp runs each as one ubatch (``speculation.depth.fillers``). The replies are still
    the ones decoded alone, and the fillers leave nothing behind in the free sequence, which keeps its prompt."""
    requests = [ask("What does a balance sheet show?", max_tokens=2), ask("Say hello.", max_tokens=12),
                ask("What is free cash flow?", max_tokens=12), ask("Name three colours.", max_tokens=12)]  # fmt: skip
    engine = Engine(model_path, EngineConfig(n_ctx=N_CTX, seq_ctx=SEQ_CTX, max_seqs=4, speculate=False))
    try:
        results = engine.run(requests, trace_tokens=True)
        batch = results[0].stats["batch"]
        assert batch["filler_tokens"] >= 8  # one a step, for the 10 steps after the first job's end
        assert_same_as_alone(engine, one_at_a_time(model_path, requests, n_ctx=N_CTX), results)
        for slot in engine.lane.slots.slots:
            assert engine.lane.ctx.seq_pos_max(slot.seq) == len(slot.tokens) - 1
        assert engine.run(requests[:1])[0].stats["batch"]["prefill_reused"] > 0
    finally:
        engine.close()
