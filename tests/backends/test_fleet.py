"""A fleet of OpenAI-compatible servers: jobs spread over them, bounded per server, a failed server's jobs retried.

The queue logic runs against small OpenAI-compatible servers on 127.0.0.1 (real HTTP, the real ``openai`` SDK);
the slow test runs two real llama-cpp-python servers and kills one mid-batch.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from minions.backends.address import host_of
from minions.backends.fleet import DEFAULT_PER_SERVER, PER_SERVER_ENV, FleetBackend, home_server
from minions.backends.openai import DEFAULT_CONCURRENCY, OpenAIBackend
from minions.backends.registry import resolve
from minions.errors import UnknownProviderError
from minions.types import ChatRequest, Message, PromptPrefix, SamplingParams
from tests.conftest import ServerStarter
from tests.loopback import LoopbackServer, send_json, serving


class EchoServer(LoopbackServer):
    """Answers every chat completion with the last word of the prompt; counts requests in flight."""

    def __init__(
        self, delay_s: float = 0.05, *, logprobs: bool = False, slots: int | None = None, serial: bool = False
    ) -> None:
        super().__init__(EchoHandler)
        self.delay_s = delay_s
        self.serial = threading.Lock() if serial else contextlib.nullcontext()
        """``serial``: it answers one request at a time, the others wait (llama-cpp-python's server)."""
        self.logprobs = logprobs  # whether it reports log-probabilities when asked
        self.slots = slots  # what it reports at /props, as llama.cpp's server does (None: 404, as others)
        self.lock = threading.Lock()
        self.in_flight = self.peak = self.served = 0

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


class EchoHandler(BaseHTTPRequestHandler):
    server: EchoServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path != "/props" or self.server.slots is None:
            self.send_error(404)
            return
        send_json(self, {"total_slots": self.server.slots, "n_ctx": 4096})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.in_flight += 1
            self.server.peak = max(self.server.peak, self.server.in_flight)
        with self.server.serial:
            time.sleep(self.server.delay_s)  # long enough for the client's workers to overlap
        with self.server.lock:
            self.server.in_flight -= 1
            self.server.served += 1
        word = body["messages"][-1]["content"].split()[-1]
        reply = {
            "id": "x",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": word}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        }
        if body.get("logprobs") and self.server.logprobs:
            top = [{"token": word, "logprob": -0.1}]
            reply["choices"][0]["logprobs"] = {"content": [{"token": word, "logprob": -0.1, "top_logprobs": top}]}
        send_json(self, reply)


@pytest.fixture
def two() -> Iterator[tuple[EchoServer, EchoServer]]:
    with serving(EchoServer()) as a, serving(EchoServer()) as b:
        yield a, b


def dead_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def jobs(n: int) -> list[ChatRequest]:
    return [ChatRequest([Message("user", f"job {i}")], SamplingParams(max_tokens=4)) for i in range(n)]


def test_spelled_as_openai_compatible_with_several_urls() -> None:
    fleet = resolve("openai-compatible/smollm2@http://127.0.0.1:8001/v1,http://127.0.0.1:8002/v1")
    assert isinstance(fleet, FleetBackend)
    assert fleet.name == "openai-compatible/smollm2"
    assert fleet.base_urls == ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1")
    assert fleet.capabilities.local and fleet.capabilities.batching
    elsewhere = resolve("openai-compatible/smollm2@http://127.0.0.1:8001/v1,http://192.0.2.7:8002/v1")
    assert not elsewhere.capabilities.local  # one server on another machine: prompts leave the device
    assert host_of(elsewhere.address) == "127.0.0.1:8001, 192.0.2.7:8002"  # where the egress log says prompts went
    with pytest.raises(UnknownProviderError, match=r"<base_url>\[,<base_url>\.\.\.\]"):
        resolve("openai-compatible/smollm2@http://127.0.0.1:8001/v1,h2:8002")


@pytest.mark.parametrize("second_reports", [True, False])
def test_a_fleet_reports_logprobs_only_where_every_server_does(second_reports: bool) -> None:
    with serving(EchoServer(logprobs=True)) as a, serving(EchoServer(logprobs=second_reports)) as b:
        fleet = FleetBackend("m", [a.base_url, b.base_url])
        assert fleet.capabilities.logprobs is second_reports
        assert fleet.capabilities.batching and a.served == b.served == 1  # each server asked once
        result = fleet.chat("Say hi", SamplingParams(max_tokens=1, logprobs=1))
        assert ("logprobs" in result.stats) is (result.stats["server"] == a.base_url or second_reports)


def test_a_server_gets_as_many_jobs_at_once_as_the_slots_it_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PER_SERVER_ENV, raising=False)
    with serving(EchoServer(slots=3)) as a, serving(EchoServer()) as b:
        single = OpenAIBackend("m", base_url=a.base_url)
        assert [r.text for r in single.batch(jobs(12))] == [str(i) for i in range(12)]
        assert single.slots == 3 and single.max_concurrency == 3 and a.peak == 3
        assert OpenAIBackend("m", base_url=b.base_url).max_concurrency == DEFAULT_CONCURRENCY  # says nothing
        a.peak = 0
        fleet = FleetBackend("m", [a.base_url, b.base_url])
        assert fleet.max_concurrency == 3 + DEFAULT_PER_SERVER
        assert len(fleet.batch(jobs(16))) == 16 and a.peak == 3 and b.peak <= DEFAULT_PER_SERVER
        assert FleetBackend("m", [a.base_url, b.base_url], per_server=1).max_concurrency == 2  # given wins


def test_jobs_spread_over_the_servers_bounded_per_server(two: tuple[EchoServer, EchoServer]) -> None:
    a, b = two
    fleet = FleetBackend("m", [a.base_url, b.base_url], per_server=2)
    done: list[int] = []
    results = fleet.batch(jobs(16), on_result=lambda i, r: done.append(i))
    assert [r.text for r in results] == [str(i) for i in range(16)]
    assert a.served + b.served == 16 and a.served > 0 and b.served > 0
    assert max(a.peak, b.peak) <= 2  # never more than per_server in flight on one server
    assert sorted(done) == list(range(16))
    assert Counter(r.stats["server"] for r in results) == {a.base_url: a.served, b.base_url: b.served}


def chunk_jobs(chunks: list[str], question: str) -> list[ChatRequest]:
    """Jobs as the local side writes them: the chunk first, marked as the shared prefix, the question after."""
    return [
        ChatRequest(
            [Message("user", f"{c}\n\nQuestion: {question}")], SamplingParams(max_tokens=4), PromptPrefix(0, len(c))
        )
        for c in chunks
    ]


def test_the_jobs_over_a_chunk_go_to_the_same_server_batch_after_batch(two: tuple[EchoServer, EchoServer]) -> None:
    a, b = two
    fleet = FleetBackend("m", [a.base_url, b.base_url], per_server=1)
    candidates = [f"Chunk {k} of the filing." for k in range(40)]
    homes = {c: home_server(chunk_jobs([c], "q")[0], 2) for c in candidates}
    assert set(homes.values()) == {0, 1}  # the chunks spread over both servers
    chunks = [c for c in candidates if homes[c] == 0][:2] + [c for c in candidates if homes[c] == 1][:2]
    urls = (a.base_url, b.base_url)
    for question in ("What was revenue?", "What was net income?"):
        results = fleet.batch(chunk_jobs(chunks, question))
        assert [r.stats["server"] for r in results] == [urls[homes[c]] for c in chunks]
    assert a.served == b.served == 4


def test_a_dead_server_loses_no_job(two: tuple[EchoServer, EchoServer]) -> None:
    a, _ = two
    fleet = FleetBackend("m", [dead_url(), a.base_url], per_server=3)
    results = fleet.batch(jobs(9))
    assert [r.text for r in results] == [str(i) for i in range(9)]
    assert {r.stats["server"] for r in results} == {a.base_url}
    assert fleet.chat("one more job").text == "job"  # chat falls over too


def test_when_every_server_fails_every_job_says_so() -> None:
    urls = [dead_url(), dead_url()]
    results = FleetBackend("m", urls, per_server=2).batch(jobs(5))
    assert all(r.finish_reason == "error" for r in results)
    assert all("Every server of openai-compatible/m failed" in (r.error or "") for r in results)
    assert urls[0] in (results[0].error or "") and urls[1] in (results[0].error or "")


@pytest.mark.slow
def test_two_real_servers_one_killed_mid_batch(start_openai_server: ServerStarter) -> None:
    with start_openai_server() as (url_a, process_a), start_openai_server() as (url_b, _):
        fleet = FleetBackend("smollm2", [url_a, url_b], per_server=2, timeout=60.0)
        answered: list[int] = []

        def kill_after_three(i: int, result: Any) -> None:
            answered.append(i)
            if len(answered) == 3:
                process_a.kill()  # mid-run: server A holds jobs in flight

        params = SamplingParams(max_tokens=6)
        requests = [ChatRequest([Message("user", f"Say the number {i}.")], params) for i in range(12)]
        results = fleet.batch(requests, on_result=kill_after_three)
    assert [r.finish_reason for r in results].count("error") == 0, [r.error for r in results]
    assert all(r.text.strip() for r in results)
    served = Counter(r.stats["server"] for r in results)
    assert served[url_b] > served[url_a]  # B took over A's jobs


def test_requests_queued_on_a_one_at_a_time_server_are_sent_again_with_fewer_at_once() -> None:
    """A server that answers one request at a time and reports no slots (as llama-cpp-python's): of 8 requests
    sent at once, the last ones wait in its queue past the timeout. They are sent again, with fewer in flight,
    and every job answers; a later batch sends no more than the lowered limit."""
    with serving(EchoServer(0.3, serial=True)) as server:
        backend = OpenAIBackend("m", base_url=server.base_url, timeout=1.0, max_retries=0)
        assert backend.max_concurrency == DEFAULT_CONCURRENCY
        results = backend.batch(jobs(8))
        assert [r.text for r in results] == [str(i) for i in range(8)]
        assert server.served > 8  # some were sent twice
        assert 1 <= backend.max_concurrency < DEFAULT_CONCURRENCY
        served = server.served
        assert [r.text for r in backend.batch(jobs(3))] == ["0", "1", "2"]
        assert server.served - served == 3 and backend._transport.in_flight.limit == backend.max_concurrency
