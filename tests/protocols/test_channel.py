"""The one channel to the remote model: every request a model off this device gets is in the egress log, counted
and priced, and none goes out that the budget cannot pay for.

The remote models here record what they are sent: a small OpenAI-compatible server on 127.0.0.1 (real HTTP, the
real ``openai`` SDK, resolved through the registry), a scripted backend, and in the slow test llama-cpp-python's
server, whose every request the SDK's HTTP client sees."""

from __future__ import annotations

import contextlib
import json
import math
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest

from minions.backends.base import Capabilities
from minions.backends.openai import OpenAIBackend, Provider
from minions.backends.registry import resolve
from minions.backends.scripted import ScriptedBackend
from minions.cost import Price, PriceTable
from minions.documents import Document
from minions.errors import BackendTimeoutError
from minions.protocols import Budget, Minions, RemoteOnly
from minions.protocols.channel import MIN_REPLY_TOKENS, prompt_tokens
from minions.tokens import TOKEN_MARGIN, count_tokens
from minions.types import Usage
from tests.loopback import LoopbackServer, send_json, serving

from .helpers import final, job_reply, plan

QUESTION = "What was revenue in fiscal 2023?"


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    body: dict[str, Any]

    @property
    def texts(self) -> list[str]:
        return [m["content"] for m in self.body.get("messages", [])]


class RecordingServer(LoopbackServer):
    """An OpenAI-compatible server that records every request it gets (any method, any path) and answers a chat
    completion with the reply scripted for the schema it asks for (by the schema's title: any server of a fleet
    answers any step); a request without one, as a backend's question of its own, gets "ok"."""

    def __init__(self, *, takes_json_schema: bool = True) -> None:
        super().__init__(RecordingHandler)
        self.replies = {"Plan": plan(), "Decision": final()}
        self.takes_json_schema = takes_json_schema
        """False: a request with ``response_format`` of type ``json_schema`` is refused (HTTP 400), as some
        servers do; the backend then sends it again with ``json_object``."""
        self.received: list[Received] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def reply_to(self, body: dict[str, Any]) -> str:
        form = body.get("response_format") or {}
        schema = form.get("json_schema", {}).get("schema") or form.get("schema") or {}
        return self.replies.get(schema.get("title", ""), "ok")


class RecordingHandler(BaseHTTPRequestHandler):
    server: RecordingServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.received.append(Received("GET", self.path, {}))
        self.send_error(404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.received.append(Received("POST", self.path, body))
        if body.get("response_format", {}).get("type") == "json_schema" and not self.server.takes_json_schema:
            self.send_error(400, "response_format json_schema is not supported")
            return
        text = self.server.reply_to(body)
        prompt = sum(count_tokens(m["content"]) for m in body["messages"])
        reply = {
            "id": "x",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": count_tokens(text)},
        }
        send_json(self, reply)


@pytest.fixture
def local() -> ScriptedBackend:
    return ScriptedBackend("scripted/local", responder=job_reply)


def assert_all_logged(received: list[Received], egress_texts: set[str]) -> None:
    """Every request the remote got is a chat completion whose every message is in the egress log."""
    assert [(r.method, r.path) for r in received] == [("POST", "/v1/chat/completions")] * len(received)
    for request in received:
        assert set(request.texts) <= egress_texts, request.body


@pytest.mark.parametrize("servers", [1, 2])
def test_a_remote_server_gets_only_the_runs_requests_each_in_the_egress_log(local, doc, servers):
    """A server cast as the remote model (or a fleet of two) is not asked what only the local side needs (whether
    it reports log-probabilities, its slots): every request it gets is one the channel logged, counted and priced."""
    with contextlib.ExitStack() as stack:
        fleet = [stack.enter_context(serving(RecordingServer())) for _ in range(servers)]
        urls = ",".join(server.base_url for server in fleet)
        result = Minions(local, resolve(f"openai-compatible/gpt-4o-mini@{urls}")).run(QUESTION, [doc])

    received = [r for server in fleet for r in server.received]
    assert result.complete and result.answer == "Revenue was $4.2 billion."
    assert_all_logged(received, {r.text for r in result.egress})
    assert len(received) == result.usage["remote"].calls == 2
    assert result.usage["remote"].cost_usd > 0


def test_a_request_the_backend_sends_twice_counts_twice(local, doc):
    """A server that refuses the reply's schema in one form gets the request again in another: both went out, both
    are counted, and their text is in the egress log."""
    with serving(RecordingServer(takes_json_schema=False)) as server:
        remote = resolve(f"openai-compatible/gpt-4o-mini@{server.base_url}")
        result = Minions(local, remote).run(QUESTION, [doc])

    assert result.complete
    assert_all_logged(server.received, {r.text for r in result.egress})
    assert len(server.received) == result.usage["remote"].calls == 3  # the plan twice, the decision once


def test_a_request_that_failed_counts_its_attempts_and_the_time_they_took(local, doc, remote):
    """A request that timed out went out (as many times as it was tried) and was waited for; with no reply it has no
    tokens. Its usage says so, rather than calls that took no time."""
    remote.enqueue(BackendTimeoutError("no reply within 120s", backend=remote.name, attempts=2))
    result = RemoteOnly(local, remote).run(QUESTION, [doc])
    usage = result.usage["remote"]
    assert result.error == "no reply within 120s" and not result.complete
    assert (usage.calls, usage.total_tokens, usage.cost_usd) == (2, 0, 0.0) and usage.seconds > 0


@pytest.mark.parametrize("protocol", [Minions, RemoteOnly])
def test_a_budget_below_one_requests_price_sends_nothing(local, doc, protocol):
    with serving(RecordingServer()) as server:
        remote = resolve(f"openai-compatible/gpt-4o-mini@{server.base_url}")
        result = protocol(local, remote, budget=Budget(max_remote_usd=1e-7)).run(QUESTION, [doc])

    assert server.received == [] and result.egress == ()
    assert not result.complete and "budget" in result.notes[0]
    assert result.usage["remote"].calls == 0


def test_the_budget_reads_the_price_a_backend_charges_itself(local, doc):
    """A backend that prices its own calls (here $100 a million tokens, a model no price table knows) is held to
    the budget at that price, before the first request."""
    remote = ScriptedBackend("scripted/unlisted", (plan(), final()), price=Price(100.0, 100.0, 100.0),
                             capabilities=Capabilities(json_schema=True))  # fmt: skip
    result = Minions(local, remote, budget=Budget(max_remote_usd=0.001)).run(QUESTION, [doc])

    assert remote.history == [] and not result.complete and "$" in result.notes[0]


def plan_prompt(local: ScriptedBackend, doc: Document) -> int:
    """The prompt tokens of a run's first request (its plan), as the channel counts them."""
    scout = ScriptedBackend("scripted/gpt-4o-mini", (plan(), final()), capabilities=Capabilities(json_schema=True))
    Minions(local, scout).run(QUESTION, [doc])
    return prompt_tokens(scout.history[0].messages, scout.name)


@pytest.mark.parametrize("limit", ["tokens", "usd"])
def test_the_budget_pays_for_the_longest_reply_a_request_allows(local, doc, remote, limit):
    """A request goes out with a reply limit the budget can pay for, lowered to what it has left; the next, which
    it cannot pay for, is not sent, and the run stops there with what it found."""
    prompt, price = plan_prompt(local, doc), PriceTable().lookup("gpt-4o-mini")
    assert price is not None
    budget = (
        Budget(max_remote_tokens=prompt + 100)
        if limit == "tokens"
        else Budget(max_remote_usd=price.cost(Usage(prompt_tokens=prompt, completion_tokens=100)))
    )
    remote.enqueue(plan(), final())
    result = Minions(local, remote, budget=budget).run(QUESTION, [doc])

    assert len(remote.history) == 1 and 99 <= remote.history[0].params.max_tokens <= 100
    assert not result.complete and "budget" in result.notes[0] and result.answer == "$4.2 billion"
    assert [r.step for r in result.egress] == ["plan:user"]


def test_a_model_with_a_tokenizer_of_its_own_is_budgeted_for_the_most_it_may_count(local, doc):
    """Our count is OpenAI's tokenizer; another model's may count up to TOKEN_MARGIN times more, and the budget
    holds all the same: its reply limit is what is left after the prompt counted that much larger."""
    prompt = math.ceil(plan_prompt(local, doc) * TOKEN_MARGIN)
    remote = ScriptedBackend(
        "scripted/llama-3.1-70b", (plan(), final()), capabilities=Capabilities(json_schema=True, local=False)
    )
    result = Minions(local, remote, budget=Budget(max_remote_tokens=prompt + 100)).run(QUESTION, [doc])
    assert len(remote.history) == 1 and 99 <= remote.history[0].params.max_tokens <= 100
    assert not result.complete and "budget" in result.notes[0]


def test_a_budget_that_leaves_less_than_the_shortest_reply_sends_nothing(local, doc, remote):
    prompt = plan_prompt(local, doc)
    result = Minions(local, remote, budget=Budget(max_remote_tokens=prompt + MIN_REPLY_TOKENS - 1)).run(QUESTION, [doc])
    assert remote.history == [] and result.egress == () and not result.complete
    assert f"remote token budget of {prompt + MIN_REPLY_TOKENS - 1} reached" in result.notes[0]


@pytest.mark.slow
def test_a_real_server_as_the_remote_gets_nothing_the_budget_cannot_pay_for(openai_server, local, doc):
    """llama-cpp-python's server cast as the remote model, with a budget below the plan's prompt: the SDK's HTTP
    client sends it nothing at all (not the question whether it reports log-probabilities, nor one for its slots),
    and the run stops at the budget."""
    sent: list[httpx.Request] = []
    client = httpx.Client(event_hooks={"request": [sent.append]})
    remote = OpenAIBackend(
        "smollm2", provider=Provider("openai-compatible", openai_server, key_env=None), http_client=client
    )
    result = Minions(local, remote, budget=Budget(max_remote_tokens=50)).run(QUESTION, [doc])

    assert sent == [] and result.egress == () and result.usage["remote"].calls == 0
    assert not result.complete and "remote token budget of 50 reached" in result.notes[0]
