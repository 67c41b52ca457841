"""The embedded backend against the real llama.cpp and the shipped SmolLM2 model."""

from __future__ import annotations

import _thread
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.llamacpp.quantize import default_local_model
from minions.errors import ContextLengthError, ModelNotFoundError
from minions.types import ChatRequest, Message, SamplingParams

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


@pytest.fixture(scope="module")
def backend() -> LlamaCppBackend:
    return LlamaCppBackend(n_ctx=2048)


def test_chat_returns_text_and_counts_local_usage(backend: LlamaCppBackend) -> None:
    result = backend.chat("Name one planet of the solar system.", SamplingParams(max_tokens=12))
    assert result.ok and result.text.strip()
    assert result.usage.prompt_tokens > 5
    assert 0 < result.usage.completion_tokens <= 12
    assert result.usage.cost_usd == 0.0 and result.usage.seconds > 0
    assert backend.capabilities.local and backend.capabilities.json_schema


def test_greedy_decoding_is_deterministic(backend: LlamaCppBackend) -> None:
    params = SamplingParams(max_tokens=16)
    assert (
        backend.chat("Say something about rivers.", params).text
        == backend.chat("Say something about rivers.", params).text
    )


def test_a_streamed_reply_comes_in_pieces_that_make_the_chat_reply(backend: LlamaCppBackend) -> None:
    params = SamplingParams(max_tokens=24)
    pieces = list(backend.stream("Say something about rivers.", params))
    assert len(pieces) > 1 and "".join(pieces) == backend.chat("Say something about rivers.", params).text


def test_a_stream_closed_early_stops_and_the_backend_goes_on(backend: LlamaCppBackend) -> None:
    stream = backend.stream("Count from one to one hundred.", SamplingParams(max_tokens=200))
    assert next(stream)
    stream.close()  # type: ignore[attr-defined]
    assert backend.chat("Name one planet.", SamplingParams(max_tokens=8)).ok


def test_the_model_size_comes_from_its_gguf_file(backend: LlamaCppBackend) -> None:
    assert 130_000_000 < (backend.parameter_count() or 0) < 140_000_000  # SmolLM2-135M


def test_json_schema_constrains_the_reply(backend: LlamaCppBackend) -> None:
    result = backend.chat("Describe a large city as JSON.", SamplingParams(max_tokens=48, json_schema=SCHEMA))
    data = json.loads(result.text)
    assert isinstance(data["city"], str) and isinstance(data["population"], int)


def test_a_prompt_longer_than_the_context_is_a_clear_error() -> None:
    small = LlamaCppBackend(n_ctx=256)
    with pytest.raises(ContextLengthError, match="smaller chunks"):
        small.chat("word " * 600, SamplingParams(max_tokens=8))


def test_the_converted_model_is_cached_and_reused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path))
    first = default_local_model("Q4_0")
    mtime = first.stat().st_mtime_ns
    assert first.parent == tmp_path / "models" and first.read_bytes()[:4] == b"GGUF"
    assert default_local_model("auto") == first and first.stat().st_mtime_ns == mtime
    assert default_local_model(None).name.endswith("Q4_1.gguf")  # as shipped, not converted


def test_a_missing_model_file_names_the_path(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match=r"missing\.gguf"):
        LlamaCppBackend(tmp_path / "missing.gguf")


def test_calls_from_several_threads_decode_on_one(backend: LlamaCppBackend) -> None:
    """llama.cpp's OpenMP teams slow each other once two live threads have decoded (see ``worker``): calls
    from any thread decode on the backend's one llama.cpp thread, and callbacks run there while the caller waits."""
    seen: set[str] = set()

    def ask(question: str) -> str:
        request = ChatRequest([Message("user", question)], SamplingParams(max_tokens=6))
        results = backend.batch([request], on_token=lambda i, text: seen.add(threading.current_thread().name))
        return results[0].text

    with ThreadPoolExecutor(max_workers=2) as pool:  # two live threads, as the server's pool has
        replies = list(pool.map(ask, ["Name a river.", "Name a mountain.", "Name a lake."]))
    assert all(replies)
    assert seen == {"minions-llama"}
    assert backend.chat("Name a sea.", SamplingParams(max_tokens=6)).ok  # and from this thread too


def test_an_interrupted_call_stops_its_run_and_the_backend_goes_on(backend: LlamaCppBackend) -> None:
    """Ctrl-C while a batch decodes: the interrupt reaches the caller, the run stops at its next step (no decode
    outlives its caller), and the next call is served."""
    import signal

    # Ctrl-C in a Python program raises KeyboardInterrupt through Python's own handler; interrupt_main raises nothing
    # under another, and in the full suite something (not every run) leaves another installed, so the test puts
    # Python's own in place for its length
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_a_run(backend)
    finally:
        signal.signal(signal.SIGINT, handler)


def _interrupt_a_run(backend: LlamaCppBackend) -> None:
    tokens: list[float] = []
    request = ChatRequest([Message("user", "Write a long story about a ship.")], SamplingParams(max_tokens=400))

    def interrupt_once_decoding(i: int, text: str) -> None:
        tokens.append(time.monotonic())
        if len(tokens) == 1:  # at the first piece: a reply that ends after a few (near-ties flip with the drafts
            _thread.interrupt_main()  # that earlier tests taught the trace cache) is interrupted all the same

    with pytest.raises(KeyboardInterrupt):
        backend.batch([request], on_token=interrupt_once_decoding)
    stopped = len(tokens)
    assert 1 <= stopped < 200  # within a poll of the wait (POLL_S), not at the end of the reply
    time.sleep(0.3)
    assert len(tokens) == stopped  # nothing decodes after the interrupt went on
    assert backend.chat("Name a sea.", SamplingParams(max_tokens=6)).ok


def test_a_forked_child_decodes_on_a_thread_of_its_own(backend: LlamaCppBackend) -> None:
    """Only the forking thread survives a fork: a child of a process whose llama.cpp thread was running starts
    its own instead of waiting for one that is not there."""
    assert backend.chat("Name a sea.", SamplingParams(max_tokens=4)).ok  # the parent's thread is running
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        ok = False
        try:
            ok = LlamaCppBackend(n_ctx=512).chat("Name a river.", SamplingParams(max_tokens=4)).ok
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.1)
    os.kill(child, 9)
    pytest.fail("the forked child never got a reply: it waited for its parent's llama.cpp thread")


def test_a_draft_model_named_in_the_environment_drafts_and_keeps_the_reply(
    backend: LlamaCppBackend, smollm2_gguf, monkeypatch
) -> None:
    """``MINIONS_DRAFT_MODEL``: the embedded engine's model gets that GGUF as its draft model: it drafts in a
    streamed reply, and a reply it drafted for is the one plain decoding gives, token for token."""
    from minions.backends.registry import DRAFT_ENV, resolve

    monkeypatch.setenv(DRAFT_ENV, str(smollm2_gguf))
    drafted = resolve("llamacpp/default")
    assert isinstance(drafted, LlamaCppBackend) and drafted.draft_model == smollm2_gguf
    try:
        quotes = "[1] (report, p.2) Total revenue for 2025 was $31.8 million, up 29 percent."
        prompt = f"{quotes}\n\nQuestion: What was the total revenue in 2025? Answer from the quote and cite it."
        # 16 tokens: past them, this reply meets a near-tie (two logits within a verify call's rounding)
        params = SamplingParams(max_tokens=16)
        streamed = "".join(drafted.stream(prompt, params))
        drafter = drafted.engine.speculator.drafters[-1]
        assert streamed.strip() and drafter.name == "draft_model" and drafter.computed > 0
        # lossless: the same request, each run computing its prompt (a restored state may round otherwise)
        request = [ChatRequest([Message("user", prompt)], params)]
        drafted.engine.clear_cache()
        plain = drafted.engine.run(request, speculate=False, trace_tokens=True)[0]
        drafted.engine.clear_cache()
        spec = drafted.engine.run(request, trace_tokens=True)[0]
        assert spec.stats["token_ids"] == plain.stats["token_ids"]
    finally:
        drafted.close()
    monkeypatch.setenv(DRAFT_ENV, "/nowhere/draft.gguf")
    with pytest.raises(ModelNotFoundError, match=r"/nowhere/draft\.gguf"):
        resolve("llamacpp/default")
