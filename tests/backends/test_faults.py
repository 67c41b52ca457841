"""The remote side against a misbehaving OpenAI-compatible server: a real HTTP server on 127.0.0.1 (threaded,
in this file) that answers slowly, with pages or broken JSON, rate limits, fails once, or resets the
connection mid-reply. Each fault must end as one of our errors, naming the server and what came back, within
a bounded time; a protocol run must return an incomplete ``RunResult`` that says why; ``minions ask`` must
exit with status 2 and one line; ``minions serve`` must stream an error event.

The fault is chosen by the base URL: ``http://127.0.0.1:PORT/<mode>/v1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from minions.apps.config import AppConfig
from minions.apps.web import create_app
from minions.backends.base import Backend
from minions.backends.ollama import OllamaBackend
from minions.backends.openai import OpenAIBackend
from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    MalformedResponseError,
    RateLimitError,
)
from minions.protocols import Minions, RemoteOnly
from minions.types import SamplingParams

from ..protocols.helpers import job_reply, make_text

HTML = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>"
ANSWER = json.dumps({"answer": "Revenue was $4.2 billion.", "citations": []})
SHORT = SamplingParams(max_tokens=16)


def completion(text: str = ANSWER) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return json.dumps({"id": "c1", "object": "chat.completion", "choices": [choice], "usage": usage}).encode()


def event(text: str) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FaultHandler)
        self.hits: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        """Set at teardown: a handler that is waiting gives up."""

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.server_port}/{mode}/v1"

    def hit(self, mode: str) -> int:
        with self.lock:
            self.hits[mode] += 1
            return self.hits[mode]


class FaultHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.path.split("/")[1]
        # The backend's own one-token question (does the server report log-probabilities?) is counted apart
        # from the calls a test makes; it meets the same fault.
        probe = bool(request.get("logprobs")) and request.get("max_tokens") == 1
        nth = self.server.hit(f"{mode}:probe" if probe else mode)
        with contextlib.suppress(OSError):  # the client gave up (a timeout), or we reset the connection ourselves
            self.answer(mode, nth, bool(request.get("stream")))

    def answer(self, mode: str, nth: int, stream: bool) -> None:
        if mode == "ok" or (mode in ("500-then-ok", "429-then-ok") and nth > 1):
            self.send(200, completion(), "application/json")
        elif mode == "slow-first-byte":
            if not self.server.stopping.wait(5):
                self.send(200, completion(), "application/json")
        elif mode == "slow-body":  # every 0.1 s a byte: never idle long enough for a read timeout
            body = completion()
            self.head(200, "application/json", len(body))
            for i in range(len(body)):
                if self.server.stopping.wait(0.1):
                    return
                self.wfile.write(body[i : i + 1])
        elif mode == "html":
            self.send(200, HTML, "text/html")
        elif mode == "cut-json":
            self.send(200, completion()[:50], "application/json")
        elif mode == "no-choices":
            self.send(200, b'{"id": "c1", "object": "chat.completion", "model": "m"}', "application/json")
        elif mode.startswith("429"):
            error = {"error": {"message": "Rate limit reached for requests", "type": "rate_limit"}}
            self.send(429, json.dumps(error).encode(), "application/json", {"Retry-After": "1"})
        elif mode == "500-then-ok":
            self.send(500, b'{"error": {"message": "internal error"}}', "application/json")
        elif mode == "reset" and stream:
            self.head(200, "text/event-stream")
            self.wfile.write(event("Hel") + event("lo"))
            self.reset()
        elif mode == "reset":
            body = completion()
            self.head(200, "application/json", len(body))
            self.wfile.write(body[: len(body) // 2])
            self.reset()
        else:
            self.send(404, b'{"error": {"message": "no such mode"}}', "application/json")

    def head(
        self, status: int, content_type: str, length: int | None = None, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Connection", "close")
        if length is not None:
            self.send_header("Content-Length", str(length))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True

    def send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.head(status, content_type, len(body), extra)
        self.wfile.write(body)

    def reset(self) -> None:
        """Close with a TCP reset (linger 0), as a crashed server or a proxy cutting the stream would."""
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()


@pytest.fixture
def faults() -> Iterator[FaultServer]:
    server = FaultServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.stopping.set()
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def backend(server: FaultServer, mode: str, **kwargs: Any) -> OpenAIBackend:
    kwargs = {"max_retries": 2, "backoff_s": 0.01, "timeout": 5.0, **kwargs}
    return OpenAIBackend("m", provider="openai", base_url=server.url(mode), api_key="unused", **kwargs)


def timed(call: Callable[[], Any]) -> tuple[BackendError, float]:
    """The error ``call`` raises, and how long it took."""
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        call()
    return info.value, time.monotonic() - start


# -- the backend: each fault, its error and the time it takes ----------------------------------------------


def test_a_server_that_never_answers_times_out_once_not_per_retry(faults: FaultServer) -> None:
    url = faults.url("slow-first-byte")
    error, seconds = timed(lambda: backend(faults, "slow-first-byte", timeout=0.5).chat("hi", SHORT))
    assert isinstance(error, BackendTimeoutError) and error.attempts == 1
    assert f"at {url} did not answer within 0.5s" in str(error)
    assert 0.4 < seconds < 2.5 and faults.hits["slow-first-byte"] == 1


def test_a_trickled_body_gets_the_timeout_in_all_not_per_byte(faults: FaultServer) -> None:
    error, seconds = timed(lambda: backend(faults, "slow-body", timeout=1.0).chat("hi", SHORT))
    assert isinstance(error, BackendTimeoutError) and faults.url("slow-body") in str(error)
    assert 0.9 < seconds < 3.0 and faults.hits["slow-body"] == 1


MALFORMED = {
    "html": ("content-type text/html", "'<!DOCTYPE html><html><head><title>502 Bad Gateway"),
    "cut-json": ("content-type application/json", "Invalid JSON"),
    "no-choices": ("choices: Field required", '\'{"id": "c1", "object": "chat.completion"'),
}


@pytest.mark.parametrize("mode", MALFORMED)
def test_a_malformed_reply_is_retried_then_named_with_what_came_back(faults: FaultServer, mode: str) -> None:
    error, seconds = timed(lambda: backend(faults, mode).chat("hi", SHORT))
    assert isinstance(error, MalformedResponseError)
    message = str(error)
    assert f"openai/m at {faults.url(mode)} answered HTTP 200 but not with a valid chat completion" in message
    assert all(shown in message for shown in MALFORMED[mode]) and "\n" not in message
    assert error.attempts == 3 and faults.hits[mode] == 3 and seconds < 3


def test_a_malformed_reply_through_achat(faults: FaultServer) -> None:
    import asyncio

    with pytest.raises(MalformedResponseError, match="content-type text/html"):
        asyncio.run(backend(faults, "html", max_retries=0).achat("hi", SHORT))
    assert faults.hits["html"] == 1


def test_rate_limit_waits_for_retry_after_then_succeeds(faults: FaultServer) -> None:
    start = time.monotonic()
    result = backend(faults, "429-then-ok").chat("hi", SHORT)
    assert result.text == ANSWER and result.stats["attempts"] == 2
    assert 0.9 < time.monotonic() - start < 4


def test_a_persistent_rate_limit_ends_as_a_rate_limit_error(faults: FaultServer) -> None:
    error, seconds = timed(lambda: backend(faults, "429", max_retries=1).chat("hi", SHORT))
    assert isinstance(error, RateLimitError) and error.attempts == 2
    assert faults.url("429") in str(error) and "Rate limit reached for requests" in str(error)
    assert 0.9 < seconds < 4


def test_a_server_error_then_success_is_retried(faults: FaultServer) -> None:
    result = backend(faults, "500-then-ok").chat("hi", SHORT)
    assert result.text == ANSWER and result.stats["attempts"] == 2 and faults.hits["500-then-ok"] == 2


def test_a_connection_reset_mid_stream_is_an_error_after_the_text_that_came(faults: FaultServer) -> None:
    pieces: list[str] = []
    error, seconds = timed(lambda: pieces.extend(backend(faults, "reset").stream("hi", SHORT)))
    assert pieces == ["Hel", "lo"]
    assert isinstance(error, BackendConnectionError) and faults.hits["reset"] == 1  # text came: not retried
    assert f"at {faults.url('reset')} dropped the connection before its reply was complete" in str(error)
    assert seconds < 3


def test_a_connection_reset_mid_reply_is_retried_then_an_error(faults: FaultServer) -> None:
    error, seconds = timed(lambda: backend(faults, "reset").chat("hi", SHORT))
    assert isinstance(error, BackendConnectionError) and "dropped the connection" in str(error)
    assert faults.hits["reset"] == 3 and seconds < 3


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        ("html", "not JSON: Expecting value; content-type text/html, body '<!DOCTYPE html>"),
        ("cut-json", "not JSON: Unterminated string"),
        ("no-choices", 'message: Field required; content-type application/json, body \'{"id": "c1"'),
    ],
)
def test_ollama_names_a_reply_that_is_not_ollamas(faults: FaultServer, mode: str, shown: str) -> None:
    host = faults.url(mode).removesuffix("/v1")
    model = OllamaBackend("m", host=host, timeout=5)
    with pytest.raises(MalformedResponseError) as info:
        model.chat("hi", SHORT)
    assert f"Ollama at {host} answered with something other than an Ollama reply" in str(info.value)
    assert shown in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(MalformedResponseError, match=f"Ollama at {host}"):
        list(model.stream("hi", SHORT))


# -- a protocol run: an incomplete result that says why, never a raw exception --------------------------------


def document() -> Document:
    return Document.from_text(make_text(), name="report.txt")


def local_model() -> ScriptedBackend:
    return ScriptedBackend("scripted/local", responder=job_reply)


@pytest.mark.parametrize(
    ("mode", "error_type", "why"),
    [
        ("html", MalformedResponseError, "content-type text/html"),
        ("cut-json", MalformedResponseError, "Invalid JSON"),
        ("no-choices", MalformedResponseError, "choices: Field required"),
        ("slow-first-byte", BackendTimeoutError, "did not answer within 0.5s"),
        ("reset", BackendConnectionError, "dropped the connection"),
    ],
)
def test_a_remote_only_run_returns_an_incomplete_result_saying_why(
    faults: FaultServer, mode: str, error_type: type[BackendError], why: str
) -> None:
    remote = backend(faults, mode, timeout=0.5)
    result = RemoteOnly(local_model(), remote).run("What was revenue in fiscal 2023?", [document()])
    assert not result.complete and result.error is not None
    assert faults.url(mode) in result.error and why in result.error
    assert any(note.startswith(error_type.__name__) for note in result.notes)


def test_a_minions_run_whose_remote_answers_a_page_returns_an_incomplete_result(faults: FaultServer) -> None:
    local = local_model()
    result = Minions(local, backend(faults, "html")).run("What was revenue in fiscal 2023?", [document()])
    assert not result.complete and result.error is not None and "content-type text/html" in result.error
    assert any(note.startswith("MalformedResponseError") for note in result.notes)
    assert faults.hits["html"] == 3 and not local.history  # no plan, so no jobs
    assert faults.hits["html:probe"] <= 1  # asked once at most whether it reports log-probabilities


# -- the CLI and the server ----------------------------------------------------------------------------------


def test_minions_ask_exits_2_with_one_line_naming_the_server(faults: FaultServer, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("Revenue in fiscal 2023 was $4.2 billion.\n")
    command = [
        str(Path(sys.executable).with_name("minions")), "ask", str(tmp_path / "notes.txt"), "What was revenue?",
        "--protocol", "remote", "--remote", f"openai-compatible/m@{faults.url('html')}",
    ]  # fmt: skip
    env = {**os.environ, "MINIONS_REMOTE_TIMEOUT": "5"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("minions: error:") and faults.url("html") in lines[0]
    assert "content-type text/html" in lines[0] and "<!DOCTYPE html>" in lines[0]


def test_minions_serve_streams_an_error_event_when_the_remote_resets(faults: FaultServer, tmp_path: Path) -> None:
    remote: Backend = backend(faults, "reset", max_retries=1)
    app = create_app(AppConfig(data_dir=tmp_path / "data"), local=local_model(), remote=remote)
    question = "What was revenue in fiscal 2023?"
    body = {
        "model": "remote",
        "stream": True,
        "messages": [{"role": "user", "content": f"{make_text()}\n\n{question}"}],
    }
    start = time.monotonic()
    with (
        TestClient(app, base_url="http://127.0.0.1:8765") as client,
        client.stream("POST", "/v1/chat/completions", json=body, timeout=30) as response,
    ):
        assert response.status_code == 200
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert time.monotonic() - start < 10
    assert events[-1] == "[DONE]"
    errors = [json.loads(e)["error"] for e in events[:-1] if "error" in json.loads(e)]
    assert len(errors) == 1 and errors[0]["type"] == "server_error"
    assert faults.url("reset") in errors[0]["message"] and "dropped the connection" in errors[0]["message"]
