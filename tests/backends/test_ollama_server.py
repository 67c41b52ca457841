"""OllamaBackend over real HTTP against a fake Ollama server on 127.0.0.1 (Ollama itself cannot be installed here).

The fake speaks the part of Ollama's API the backend uses (``/api/show``, ``/api/chat``, ``/api/tags``) and
behaves as Ollama does where it matters: a prompt longer than ``num_ctx`` is cut without a word (its reply then
says so, for the tests to see), an unknown model is a 404, and it records how many requests were in flight at
once. The live test against a real server is in test_ollama.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from minions.backends.ollama import OllamaBackend
from minions.errors import ModelNotFoundError
from minions.types import ChatRequest, Message, SamplingParams
from tests.loopback import LoopbackServer, send_json, serving

MODEL = "llama3.2"
TRAINED = 65_536
CHARS_PER_TOKEN = 4


class FakeOllama(LoopbackServer):
    def __init__(self, release_at: int = 1) -> None:
        super().__init__(Handler)
        self.lock = threading.Lock()
        self.in_flight = self.peak = 0
        self.release_at = release_at
        self.released = threading.Event()  # set once `release_at` requests are in flight together
        self.chats: list[dict[str, Any]] = []
        self.shows = 0

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.chats.append(body)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            if self.in_flight >= self.release_at:
                self.released.set()
        self.released.wait(timeout=5)  # a client that sends one at a time never gets here with company
        with self.lock:
            self.in_flight -= 1
        prompt = "".join(m["content"] for m in body["messages"])
        tokens = len(prompt) // CHARS_PER_TOKEN
        options = body["options"]
        room = options["num_ctx"] - options["num_predict"]
        truncated = tokens > room  # what Ollama does: keep the last num_ctx tokens, say nothing
        return {
            "model": body["model"],
            "message": {"role": "assistant", "content": "TRUNCATED" if truncated else f"read:{prompt.split()[-1]}"},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": min(tokens, room),
            "eval_count": 2,
        }


class Handler(BaseHTTPRequestHandler):
    server: FakeOllama

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        send_json(self, body, status)

    def do_GET(self) -> None:
        if self.path == "/api/tags":
            self._send(200, {"models": [{"name": f"{MODEL}:latest", "model": f"{MODEL}:latest", "size": 2_000_000}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("model") != MODEL:
            self._send(404, {"error": f"model '{body.get('model')}' not found"})
        elif self.path == "/api/show":
            self.server.shows += 1
            self._send(200, {"details": {"family": "llama"}, "model_info": {"llama.context_length": TRAINED}})
        elif self.path == "/api/chat":
            self._send(200, self.server.chat(body))
        else:
            self._send(404, {"error": "not found"})


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with serving(FakeOllama()) as server:
        yield server


def job(text: str, max_tokens: int = 16) -> ChatRequest:
    return ChatRequest([Message("user", text)], SamplingParams(max_tokens=max_tokens))


def test_batch_sends_jobs_concurrently_up_to_num_parallel(fake: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "3")
    fake.release_at = 3
    backend = OllamaBackend(MODEL, host=fake.url)
    assert backend.max_concurrency == 3 and backend.capabilities.batching
    seen: list[int] = []
    results = backend.batch([job(f"question number {i:02d}") for i in range(9)], on_result=lambda i, r: seen.append(i))
    assert [r.text for r in results] == [f"read:{i:02d}" for i in range(9)]  # in the order given
    assert fake.peak == 3  # three at once, never more
    assert sorted(seen) == list(range(9)) and fake.shows == 1


def test_num_parallel_must_be_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "many")
    with pytest.raises(Exception, match=r"OLLAMA_NUM_PARALLEL='many'.*e\.g\. 4"):
        OllamaBackend(MODEL)


def test_long_prompts_get_a_context_that_holds_them(fake: FakeOllama) -> None:
    backend = OllamaBackend(MODEL, host=fake.url, parallel=2)
    words = "Revenue grew 29 percent to 31.8 million dollars in 2025 while costs fell. "
    long = words * (5 * 8192 * CHARS_PER_TOKEN // len(words))  # five times the default context of 8192 tokens
    results = backend.batch([job("short question"), job(long + " end of filing")])
    assert [r.text for r in results] == ["read:question", "read:filing"]  # nothing was cut
    contexts = {c["options"]["num_ctx"] for c in fake.chats}
    assert len(contexts) == 1  # one value for the batch: Ollama keeps one copy of the model loaded
    assert contexts.pop() >= len(long) // CHARS_PER_TOKEN + 16
    assert results[1].usage.prompt_tokens >= len(long) // CHARS_PER_TOKEN  # the server read all of it


def test_a_short_job_keeps_the_default_context(fake: FakeOllama) -> None:
    OllamaBackend(MODEL, host=fake.url, context_window=4096).chat("hello")
    assert fake.chats[-1]["options"]["num_ctx"] == 4096


def test_a_prompt_longer_than_the_model_holds_fails_alone(fake: FakeOllama) -> None:
    backend = OllamaBackend(MODEL, host=fake.url, parallel=2)
    too_long = "x " * (TRAINED * CHARS_PER_TOKEN)
    results = backend.batch([job("first"), job(too_long), job("third")])
    assert [r.text for r in results[::2]] == ["read:first", "read:third"]
    assert results[1].finish_reason == "error" and "ContextLengthError" in (results[1].error or "")
    assert "smaller chunks" in (results[1].error or "")
    assert len(fake.chats) == 2  # the one that cannot fit was never sent to be cut


def test_a_missing_model_says_ollama_pull_before_sending_jobs(fake: FakeOllama) -> None:
    backend = OllamaBackend("qwen2.5:7b", host=fake.url)
    with pytest.raises(ModelNotFoundError, match=r"ollama pull qwen2\.5:7b"):
        backend.batch([job("a"), job("b")])
    with pytest.raises(ModelNotFoundError, match=r"ollama pull qwen2\.5:7b"):
        backend.chat("a")
    assert fake.chats == []


def test_inventory_lists_the_servers_models(fake: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    from minions.backends.inventory import model_inventory

    monkeypatch.setenv("OLLAMA_HOST", fake.url)
    specs = [i.spec for i in model_inventory()]
    assert f"ollama/{MODEL}:latest" in specs
