"""OpenAIBackend: request mapping, retries, backoff and error translation, with the real ``openai`` SDK
sending to an httpx.MockTransport; then (marked ``slow``) against a real OpenAI-compatible server,
llama-cpp-python's, serving the shipped SmolLM2 model on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import httpx
import openai
import pytest

import minions.backends.openai as openai_backend
from minions.backends.base import Capabilities
from minions.backends.openai import PROVIDERS, OpenAIBackend, Provider, backoff_delay
from minions.cost import Price, PriceTable, default_price_table
from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    ConfigError,
    ContextLengthError,
    MalformedResponseError,
    MissingAPIKeyError,
    ModelNotFoundError,
    RateLimitError,
    UnknownProviderError,
)
from minions.types import ChatRequest, Message, SamplingParams, Usage

from ..conftest import SERVER_CONTEXT

BASE = "http://api.test/v1"


def completion(text: str = "Paris.", *, usage: dict[str, Any] | None = None, finish: str = "stop") -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


USAGE = {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}


def reply(status: int = 200, body: Any = None, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json=completion(usage=USAGE) if body is None else body, headers=headers)


def error_body(message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


class Script:
    """A mock server that answers with the scripted responses in turn (the last one repeats)."""

    def __init__(self, *responses: httpx.Response | Callable[[httpx.Request], httpx.Response]) -> None:
        self.responses = responses
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        r = self.responses[min(len(self.requests), len(self.responses)) - 1]
        return r(request) if callable(r) else r

    @property
    def sent(self) -> dict[str, Any]:
        return json.loads(self.requests[-1].content)


def make_backend(server: Script, model: str = "gpt-4o-mini", **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("backoff_s", 0.001)
    kwargs.setdefault("base_url", BASE)
    return OpenAIBackend(
        model,
        http_client=httpx.Client(transport=httpx.MockTransport(server)),
        **kwargs,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- construction, keys, providers ----------------------------------------------------------------------


def test_name_capabilities_and_context_windows() -> None:
    backend = OpenAIBackend("gpt-4o-mini")
    assert backend.name == "openai/gpt-4o-mini"
    caps = backend.capabilities
    assert caps.json_schema and caps.logprobs and caps.streaming
    assert caps.batching and not caps.local  # a hosted API runs a batch's requests together
    assert caps.context_window == 128_000
    assert backend.max_concurrency == 8
    assert OpenAIBackend("gpt-4.1-mini").capabilities.context_window == 1_047_576
    assert OpenAIBackend("gpt-5-nano").capabilities.context_window == 400_000
    assert OpenAIBackend("some-model", provider="groq").capabilities.context_window == 128_000
    assert OpenAIBackend("x", context_window=4096).capabilities.context_window == 4096


def test_providers_are_configuration() -> None:
    backend = OpenAIBackend("deepseek-chat", provider="deepseek")
    assert backend.name == "deepseek/deepseek-chat"
    assert backend.base_url == PROVIDERS["deepseek"].base_url
    assert PROVIDERS["openai"].base_url is None and PROVIDERS["openai"].key_env == "OPENAI_API_KEY"
    assert PROVIDERS["gemini"].key_env == "GEMINI_API_KEY"
    mine = Provider("mine", "http://127.0.0.1:9/v1", None)
    assert OpenAIBackend("m", provider=mine).name == "mine/m"
    with pytest.raises(UnknownProviderError, match="openrouter"):
        OpenAIBackend("m", provider="nope")


def test_on_this_device_is_decided_by_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIBackend("smollm2", base_url="http://127.0.0.1:8080/v1").capabilities.local
    assert not OpenAIBackend("smollm2", base_url="http://192.0.2.1:8080/v1").capabilities.local
    hosted = OpenAIBackend("gpt-4o-mini")
    assert hosted.address == "https://api.openai.com/v1" and not hosted.capabilities.local


def test_the_sdk_sends_where_the_address_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_BASE_URL is read once: the address judged on this device is the one requests go to."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:4000/v1")
    server = Script(reply())
    backend = OpenAIBackend("gpt-4o-mini", api_key="k", http_client=httpx.Client(transport=httpx.MockTransport(server)))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://192.0.2.1:4000/v1")
    assert backend.capabilities.local and backend.address == "http://localhost:4000/v1"
    backend.chat("hi")
    assert str(server.requests[0].url) == "http://localhost:4000/v1/chat/completions"


def test_missing_key_is_reported_at_first_call_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = OpenAIBackend("gpt-4o-mini")  # constructing needs no key
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY") as info:
        backend.chat("hi")
    assert info.value.env_var == "OPENAI_API_KEY" and info.value.provider == "openai"


def test_key_is_read_lazily_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = Script(reply())
    backend = make_backend(server, api_key=None, base_url="https://api.openai.com/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    backend.chat("hi")
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


@pytest.mark.parametrize("openai_key", [None, "sk-openai-secret"])
def test_custom_base_url_without_key_sends_a_placeholder(
    monkeypatch: pytest.MonkeyPatch, openai_key: str | None
) -> None:
    """A custom address is never sent OPENAI_API_KEY: that key goes to OpenAI's address only."""
    if openai_key:
        monkeypatch.setenv("OPENAI_API_KEY", openai_key)
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = Script(reply())
    make_backend(server, api_key=None).chat("hi")
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_one_sdk_client_per_backend() -> None:
    server = Script(reply())
    backend = make_backend(server)
    backend.chat("a")
    client = backend._transport._client
    backend.chat("b")
    assert backend._transport._client is client is not None


# -- the request --------------------------------------------------------------------------------------


def test_request_maps_sampling_params() -> None:
    server = Script(reply())
    params = SamplingParams(temperature=0.3, top_p=0.8, max_tokens=40, stop=("END",), seed=11)
    make_backend(server).chat([Message("system", "Be brief."), Message("user", "Capital?")], params)
    request = server.requests[0]
    assert request.url == f"{BASE}/chat/completions"
    sent = server.sent
    assert sent["model"] == "gpt-4o-mini"
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital?"}]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.3, 0.8, 40)
    assert sent["stop"] == ["END"] and sent["seed"] == 11
    assert "response_format" not in sent and "stream" not in sent


def test_request_omits_empty_stop_and_seed() -> None:
    server = Script(reply())
    make_backend(server).chat("hi")
    assert "stop" not in server.sent and "seed" not in server.sent


def test_json_schema_becomes_a_strict_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    server = Script(reply(body=completion('{"a": 1}', usage=USAGE)))
    result = make_backend(server).chat("hi", SamplingParams(json_schema=schema))
    assert server.sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": schema, "strict": True},
    }
    assert json.loads(result.text) == {"a": 1}


def test_json_object_style_for_servers_that_want_it() -> None:
    schema = {"type": "object"}
    server = Script(reply())
    make_backend(server, json_schema_style="json_object").chat("hi", SamplingParams(json_schema=schema))
    assert server.sent["response_format"] == {"type": "json_object", "schema": schema}


def test_reasoning_models_get_max_completion_tokens() -> None:
    server = Script(reply())
    make_backend(server, model="gpt-5-mini").chat("hi", SamplingParams(max_tokens=99))
    assert server.sent["max_completion_tokens"] == 99
    assert "max_tokens" not in server.sent and "temperature" not in server.sent


def test_logprobs_are_asked_for_and_capped_where_the_api_caps_them() -> None:
    server = Script(reply())
    make_backend(server).chat("hi", SamplingParams(logprobs=5))
    assert server.sent["logprobs"] is True and server.sent["top_logprobs"] == 5
    make_backend(server).chat("hi", SamplingParams(logprobs=50))
    assert server.sent["top_logprobs"] == openai_backend.MAX_TOP_LOGPROBS
    make_backend(server).chat("hi")
    assert "logprobs" not in server.sent and "top_logprobs" not in server.sent


def token(text: str, logprob: float, *top: tuple[str, float]) -> dict[str, Any]:
    alternatives = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top]
    return {"token": text, "logprob": logprob, "bytes": None, "top_logprobs": alternatives}


def with_logprobs(body: dict[str, Any], *tokens: dict[str, Any]) -> dict[str, Any]:
    body["choices"][0]["logprobs"] = {"content": list(tokens), "refusal": None}
    return body


def test_logprobs_of_the_reply_are_read_most_likely_first() -> None:
    # a server may list the alternatives in any order, and add the chosen token to them
    body = with_logprobs(
        completion(" B.", usage=USAGE),
        token(" B", -0.2, (" C", -2.5), (" B", -0.2), (" A", -1.5)),
        token(".", -0.01),
    )
    result = make_backend(Script(reply(body=body))).chat("hi", SamplingParams(logprobs=3))
    assert result.stats["logprobs"] == [[[" B", -0.2], [" A", -1.5], [" C", -2.5]], [[".", -0.01]]]


def test_a_reply_without_logprobs_has_none_in_its_stats() -> None:
    result = make_backend(Script(reply())).chat("hi", SamplingParams(logprobs=3))
    assert "logprobs" not in result.stats


def local_backend(server: Script) -> OpenAIBackend:
    provider = Provider("openai-compatible", BASE, key_env=None)
    return OpenAIBackend("m", provider=provider, http_client=httpx.Client(transport=httpx.MockTransport(server)))


@pytest.mark.parametrize(
    ("answer", "reports"),
    [
        (reply(body=with_logprobs(completion("Hi"), token("Hi", -0.1, ("Hi", -0.1)))), True),
        (reply(), False),  # a proxy that drops them
        (reply(400, error_body("logprobs is not supported")), False),
        (reply(500, error_body("logprobs is not supported for models created with logits_all=False")), False),
    ],
    ids=["reports", "drops-them", "rejects-400", "fails-500"],
)
def test_a_server_is_asked_once_whether_it_reports_logprobs(answer: httpx.Response, reports: bool) -> None:
    server = Script(answer)
    backend = local_backend(server)
    assert server.requests == []  # building the backend asks nothing
    assert backend.capabilities.logprobs is reports
    # asked once, with its slots (whether it runs requests together: ``batching``)
    assert backend.capabilities.logprobs is reports and not backend.capabilities.batching
    assert sorted(r.url.path for r in server.requests) == ["/props", "/v1/chat/completions"]
    asked = server.sent
    assert asked["logprobs"] is True and asked["top_logprobs"] == 1 and asked["max_tokens"] == 1


def test_a_server_that_cannot_be_reached_counts_as_one_without_logprobs() -> None:
    provider = Provider("openai-compatible", f"http://127.0.0.1:{free_port()}/v1", key_env=None)
    assert OpenAIBackend("m", provider=provider, max_retries=3).capabilities.logprobs is False


def test_hosted_apis_are_not_asked_about_logprobs() -> None:
    server = Script(reply())
    client = httpx.Client(transport=httpx.MockTransport(server))
    assert OpenAIBackend("gpt-4o-mini", api_key="sk-test", http_client=client).capabilities.logprobs
    assert not OpenAIBackend("o3-mini").capabilities.logprobs
    assert not OpenAIBackend("llama-3.1-8b", provider="groq").capabilities.logprobs
    assert server.requests == []


def test_capabilities_declared_outright_are_not_asked_about() -> None:
    server = Script(reply())
    backend = local_backend(server)
    backend.capabilities = Capabilities(json_schema=True, logprobs=False, local=True)
    assert not backend.capabilities.logprobs and server.requests == []


# -- the result -----------------------------------------------------------------------------------------


def test_result_usage_cost_and_timings() -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 500,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 200},
    }
    result = make_backend(Script(reply(body=completion(usage=usage)))).chat("hi")
    assert result.ok and result.text == "Paris." and result.finish_reason == "stop"
    assert result.model == "openai/gpt-4o-mini"
    u = result.usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens, u.calls) == (1000, 500, 200, 1)
    # gpt-4o-mini: $0.15 / 0.075 (cached) / 0.60 per million tokens
    assert u.cost_usd == pytest.approx((800 * 0.15 + 200 * 0.075 + 500 * 0.60) / 1e6)
    assert u.cost_usd == pytest.approx(default_price_table().cost("gpt-4o-mini", Usage(1000, 500, 200)))
    assert result.timings.total_s > 0 and u.seconds == result.timings.total_s
    assert result.stats == {"attempts": 1}


def test_price_table_can_be_overridden() -> None:
    prices = PriceTable({"my-model": Price(1.0, 1.0, 2.0)})
    result = make_backend(Script(reply()), model="my-model", prices=prices).chat("hi")
    assert result.usage.cost_usd == pytest.approx((20 * 1.0 + 3 * 2.0) / 1e6)


def test_length_finish_reason() -> None:
    result = make_backend(Script(reply(body=completion(usage=USAGE, finish="length")))).chat("hi")
    assert result.finish_reason == "length"


def test_missing_usage_is_counted_locally() -> None:
    result = make_backend(Script(reply(body=completion("Paris is the capital.")))).chat("Capital of France?")
    assert result.stats["usage_estimated"] is True
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0


# -- retries and backoff ------------------------------------------------------------------------------


def test_rate_limit_then_success_counts_attempts() -> None:
    server = Script(reply(429, error_body("Rate limit reached")), reply())
    result = make_backend(server).chat("hi")
    assert result.ok and result.text == "Paris."
    assert result.stats["attempts"] == 2 and len(server.requests) == 2


def test_persistent_503_raises_after_max_retries() -> None:
    server = Script(reply(503, error_body("overloaded")))
    with pytest.raises(BackendError, match="503") as info:
        make_backend(server, max_retries=3).chat("hi")
    assert type(info.value) is BackendError
    assert info.value.attempts == 4 and len(server.requests) == 4
    assert info.value.backend == "openai/gpt-4o-mini"


def test_persistent_rate_limit_raises_rate_limit_error() -> None:
    server = Script(reply(429, error_body("Rate limit reached")))
    with pytest.raises(RateLimitError, match="rate limited") as info:
        make_backend(server, max_retries=2).chat("hi")
    assert info.value.attempts == 3


def test_max_retries_zero_tries_once() -> None:
    server = Script(reply(500, error_body("boom")))
    with pytest.raises(BackendError):
        make_backend(server, max_retries=0).chat("hi")
    assert len(server.requests) == 1


def test_client_errors_are_not_retried() -> None:
    server = Script(reply(400, error_body("Invalid value for 'temperature'")))
    with pytest.raises(BackendError, match="temperature") as info:
        make_backend(server).chat("hi")
    assert len(server.requests) == 1 and info.value.attempts == 1


def test_retry_after_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(openai_backend.time, "sleep", waits.append)
    server = Script(reply(429, error_body("slow down"), headers={"retry-after": "7"}), reply())
    make_backend(server).chat("hi")
    assert waits == [7.0]


def test_retry_after_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(openai_backend.time, "sleep", waits.append)
    server = Script(reply(429, error_body("slow down"), headers={"retry-after": "86400"}), reply())
    make_backend(server).chat("hi")
    assert waits == [openai_backend.MAX_RETRY_AFTER_S]


def test_backoff_grows_exponentially_with_jitter() -> None:
    for attempt in range(1, 6):
        delays = [backoff_delay(attempt, 1.0) for _ in range(50)]
        expected = min(2.0 ** (attempt - 1), openai_backend.MAX_BACKOFF_S)
        assert all(expected / 2 <= d <= expected for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert backoff_delay(30, 1.0) <= openai_backend.MAX_BACKOFF_S
    assert backoff_delay(1, 1.0, retry_after=2.5) == 2.5


def test_a_timeout_is_not_retried() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    server = Script(slow)
    with pytest.raises(BackendTimeoutError, match=rf"openai/gpt-4o-mini at {BASE} did not answer within 5s") as info:
        make_backend(server, max_retries=3, timeout=5).chat("hi")
    assert info.value.attempts == 1 and len(server.requests) == 1
    assert "MINIONS_REMOTE_TIMEOUT" in str(info.value)


def test_a_timeout_after_a_transient_failure_ends_the_retries() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    server = Script(reply(503, error_body("busy")), slow, reply())
    with pytest.raises(BackendTimeoutError) as info:
        make_backend(server, max_retries=3).chat("hi")
    assert info.value.attempts == 2 and len(server.requests) == 2


def test_timeout_comes_from_the_argument_the_environment_or_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINIONS_REMOTE_TIMEOUT", raising=False)
    assert OpenAIBackend("m").timeout == openai_backend.DEFAULT_TIMEOUT_S == 120.0
    monkeypatch.setenv("MINIONS_REMOTE_TIMEOUT", "7.5")
    assert OpenAIBackend("m").timeout == 7.5
    assert OpenAIBackend("m", timeout=3).timeout == 3
    for bad in ("soon", "0", "-1", "inf"):
        monkeypatch.setenv("MINIONS_REMOTE_TIMEOUT", bad)
        with pytest.raises(ConfigError, match="MINIONS_REMOTE_TIMEOUT"):
            OpenAIBackend("m")
    with pytest.raises(ConfigError, match="timeout"):
        OpenAIBackend("m", timeout=0)


# -- error translation --------------------------------------------------------------------------------


def test_rejected_key_names_the_variable() -> None:
    server = Script(reply(401, error_body("Incorrect API key provided", "invalid_api_key")))
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        make_backend(server).chat("hi")
    assert len(server.requests) == 1


def test_unknown_model_names_the_model() -> None:
    server = Script(reply(404, error_body("The model `gpt-9` does not exist", "model_not_found")))
    with pytest.raises(ModelNotFoundError, match="'gpt-9'"):
        make_backend(server, model="gpt-9").chat("hi")


def test_context_length_error() -> None:
    message = "This model's maximum context length is 128000 tokens. However, you requested 130000 tokens."
    server = Script(reply(400, error_body(message, "context_length_exceeded")))
    with pytest.raises(ContextLengthError, match="maximum context length") as raised:
        make_backend(server).chat("hi")
    assert raised.value.window == 128000  # what the server says, for a caller that sends less


def test_context_length_error_without_the_window_says_none() -> None:
    server = Script(reply(400, error_body("The prompt is too long for this model.", "context_length_exceeded")))
    with pytest.raises(ContextLengthError) as raised:
        make_backend(server).chat("hi")
    assert raised.value.window is None


def test_context_length_error_from_wording_alone() -> None:
    server = Script(reply(400, {"error": "Requested tokens (5000) exceed context window of 4096"}))
    with pytest.raises(ContextLengthError) as raised:
        make_backend(server).chat("hi")
    assert raised.value.window == 4096


def test_refusing_server_is_a_connection_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    backend = OpenAIBackend("m", base_url=url, max_retries=1, backoff_s=0.001)
    with pytest.raises(BackendConnectionError, match=r"Cannot reach .*is the server running") as info:
        backend.chat("hi")
    assert url in str(info.value) and info.value.attempts == 2


HTML = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
MALFORMED = {
    "an html page": (httpx.Response(200, content=HTML, headers={"content-type": "text/html"}), "text/html"),
    "cut-off json": (
        httpx.Response(
            200, content=json.dumps(completion()).encode()[:60], headers={"content-type": "application/json"}
        ),
        "Invalid JSON",
    ),
    "no choices": (reply(body={"id": "x", "object": "chat.completion"}), "choices: Field required"),
    "empty choices": (reply(body={"choices": []}), "choices: List should have at least 1 item"),
    "no message": (reply(body={"choices": [{"index": 0, "finish_reason": "stop"}]}), "choices.0.message"),
    "a json string": (reply(body="hello"), "'\"hello\"'"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_replies_are_retried_then_named_with_what_came_back(name: str) -> None:
    response, shown = MALFORMED[name]
    server = Script(response)
    with pytest.raises(MalformedResponseError) as info:
        make_backend(server, max_retries=1).chat("hi")
    message = str(info.value)
    assert f"openai/gpt-4o-mini at {BASE} answered HTTP 200" in message and shown in message
    assert "content-type" in message and "\n" not in message
    assert info.value.attempts == 2 and len(server.requests) == 2
    assert info.value.content_type == response.headers["content-type"]


def test_a_long_malformed_reply_shows_its_start_and_size() -> None:
    body = b"<html>" + b"x" * 1000
    server = Script(httpx.Response(200, content=body, headers={"content-type": "text/html; charset=utf-8"}))
    with pytest.raises(MalformedResponseError) as info:
        make_backend(server, max_retries=0).chat("hi")
    assert f"{body[:80].decode()!r}... (1006 bytes)" in str(info.value)
    assert info.value.raw == body[:80].decode()


def test_a_malformed_reply_then_a_good_one_succeeds() -> None:
    server = Script(MALFORMED["an html page"][0], reply())
    result = make_backend(server).chat("hi")
    assert result.text == "Paris." and result.stats["attempts"] == 2


def test_batch_runs_on_threads_and_keeps_failures() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["messages"][-1]["content"]
        if prompt == "fail":
            return reply(400, error_body("bad request"))
        return reply(body=completion(prompt.upper(), usage=USAGE))

    backend = make_backend(Script(answer))
    prompts = ["a", "fail", "c", "d"]
    results = backend.batch([ChatRequest([Message("user", p)]) for p in prompts])
    assert [r.text for r in results] == ["A", "", "C", "D"]
    assert results[1].finish_reason == "error" and "bad request" in (results[1].error or "")


# -- stream and achat -----------------------------------------------------------------------------------


def sse(pieces: Sequence[str]) -> bytes:
    chunks = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}],
        }
        for p in pieces
    ]
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def test_stream_yields_deltas() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, content=sse(["Pa", "ris", "."]), headers={"content-type": "text/event-stream"})

    server = Script(reply(503, error_body("busy")), handler)
    assert list(make_backend(server).stream("Capital?")) == ["Pa", "ris", "."]
    assert len(server.requests) == 2  # opening the stream is retried


def test_stream_broken_midway_is_a_connection_error() -> None:
    class Broken(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield sse(["Pa"]).split(b"data: [DONE]")[0]
            raise httpx.ReadError("connection reset by peer")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Broken(), headers={"content-type": "text/event-stream"})

    pieces: list[str] = []
    with pytest.raises(BackendConnectionError):
        pieces.extend(make_backend(Script(handler)).stream("hi"))
    assert pieces == ["Pa"]


def event_stream(body: bytes) -> httpx.Response:
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


def test_stream_cut_off_before_done_is_malformed() -> None:
    cut = sse(["Pa", "ris"]).split(b"data: [DONE]")[0]
    pieces: list[str] = []
    with pytest.raises(
        MalformedResponseError, match=r"ended before the reply did.*text/event-stream.*completion.chunk"
    ):
        pieces.extend(make_backend(Script(event_stream(cut))).stream("hi"))
    assert pieces == ["Pa", "ris"]


def test_stream_with_an_event_that_is_not_json_is_malformed() -> None:
    body = sse(["Pa"]).split(b"data: [DONE]")[0] + b'data: {"choices": [{"delta": {"cont\n\n'
    with pytest.raises(MalformedResponseError, match=r"Invalid JSON.*'\{\"choices\"") as info:
        list(make_backend(Script(event_stream(body))).stream("hi"))
    assert info.value.content_type == "text/event-stream"


def test_stream_error_event_is_an_error_with_the_servers_message() -> None:
    body = sse(["Pa"]).split(b"data: [DONE]")[0] + b'data: {"error": {"message": "model crashed"}}\n\n'
    with pytest.raises(BackendError, match=rf"at {BASE} sent an error .*model crashed"):
        list(make_backend(Script(event_stream(body))).stream("hi"))


def test_stream_answered_with_a_page_is_retried_then_malformed() -> None:
    server = Script(MALFORMED["an html page"][0])
    with pytest.raises(MalformedResponseError, match=r"not an event stream; content-type text/html") as info:
        list(make_backend(server, max_retries=1).stream("hi"))
    assert len(server.requests) == 2 and info.value.attempts == 2


def test_stream_ending_with_a_finish_reason_needs_no_done() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}
    body = f"data: {json.dumps(chunk)}\n\n".encode()
    assert list(make_backend(Script(event_stream(body))).stream("hi")) == ["Hi"]


def test_stream_translates_errors() -> None:
    server = Script(reply(404, error_body("no such model")))
    with pytest.raises(ModelNotFoundError):
        list(make_backend(server).stream("hi"))


def async_backend(server: Script, monkeypatch: pytest.MonkeyPatch) -> OpenAIBackend:
    """A backend whose async SDK client sends to ``server`` (``http_client`` only carries sync calls)."""
    backend = make_backend(server)

    def async_client() -> openai.AsyncOpenAI:
        transport = httpx.AsyncClient(transport=httpx.MockTransport(server))
        return openai.AsyncOpenAI(api_key="sk-test", base_url=BASE, max_retries=0, http_client=cast(Any, transport))

    monkeypatch.setattr(backend._transport, "_async_client", async_client)
    return backend


def test_achat_retries_like_chat(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Script(reply(429, error_body("Rate limit reached")), reply())
    result = asyncio.run(async_backend(server, monkeypatch).achat("hi"))
    assert result.text == "Paris." and result.stats["attempts"] == 2 and len(server.requests) == 2


def test_achat_translates_like_chat(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Script(reply(404, error_body("no such model")))
    with pytest.raises(ModelNotFoundError):
        asyncio.run(async_backend(server, monkeypatch).achat("hi"))


def test_achat_checks_replies_like_chat(monkeypatch: pytest.MonkeyPatch) -> None:
    cut = json.dumps(completion()).encode()[:60]
    server = Script(lambda _: httpx.Response(200, content=cut, headers={"content-type": "application/json"}))
    with pytest.raises(MalformedResponseError, match="Invalid JSON"):
        asyncio.run(async_backend(server, monkeypatch).achat("hi"))
    assert len(server.requests) == 5  # the default max_retries, 4


# -- a real OpenAI-compatible server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def local(openai_server: str) -> OpenAIBackend:
    # llama-cpp-python's server takes a schema as {"type": "json_object", "schema": ...}
    return OpenAIBackend("smollm2", base_url=openai_server, json_schema_style="json_object", max_retries=1)


SHORT = SamplingParams(max_tokens=32)


@pytest.mark.slow
def test_real_server_chat(local: OpenAIBackend) -> None:
    result = local.chat("What is the capital of France?", SHORT)
    assert result.ok and result.text.strip()
    assert result.usage.prompt_tokens > 0 and 0 < result.usage.completion_tokens <= 32
    assert "usage_estimated" not in result.stats
    assert result.usage.cost_usd == 0.0


@pytest.mark.slow
def test_real_server_json_schema(local: OpenAIBackend) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
    }
    result = local.chat("Name the capital of France as JSON.", SHORT.with_(json_schema=schema, max_tokens=48))
    data = json.loads(result.text)
    assert isinstance(data, dict) and isinstance(data["city"], str)


@pytest.mark.slow
def test_registry_spelling_falls_back_to_the_schema_style_the_server_takes(openai_server: str) -> None:
    from minions.backends.registry import resolve

    backend = resolve(f"openai-compatible/smollm2@{openai_server}")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    result = backend.chat("Give a number as JSON.", SHORT.with_(json_schema=schema))
    assert isinstance(json.loads(result.text)["n"], int)
    assert isinstance(backend, OpenAIBackend) and backend.json_schema_style == "json_object"


@pytest.mark.slow
def test_real_server_stream(local: OpenAIBackend) -> None:
    pieces: Iterator[str] = local.stream("Say hello.", SHORT)
    text = "".join(pieces)
    assert text.strip()


@pytest.mark.slow
def test_real_server_achat(local: OpenAIBackend) -> None:
    result = asyncio.run(local.achat("Say hello.", SHORT))
    assert result.ok and result.text.strip() and result.usage.completion_tokens > 0


@pytest.mark.slow
def test_real_server_context_length(local: OpenAIBackend) -> None:
    with pytest.raises(ContextLengthError) as raised:
        local.chat("hello " * 6000, SHORT)
    assert raised.value.window == SERVER_CONTEXT  # llama-cpp-python's server states its --n_ctx


@pytest.mark.slow
def test_killed_server_is_a_connection_error(start_openai_server: Callable[..., Any]) -> None:
    with start_openai_server() as (url, process):
        backend = OpenAIBackend("smollm2", base_url=url, max_retries=1, backoff_s=0.05)
        assert backend.chat("Hi", SamplingParams(max_tokens=4)).ok
        process.kill()
        process.wait(timeout=10)
        start = time.monotonic()
        with pytest.raises(BackendConnectionError, match=url):
            backend.chat("Hi", SamplingParams(max_tokens=4))
        assert time.monotonic() - start < 10


@pytest.mark.slow
def test_real_server_reports_logprobs_and_they_are_read(openai_server: str) -> None:
    from minions.backends.registry import resolve

    backend = resolve(f"openai-compatible/smollm2@{openai_server}")
    assert backend.capabilities.logprobs  # asked once, and llama-cpp-python's server reports them
    result = backend.chat("Name a colour.", SamplingParams(max_tokens=4, logprobs=5))
    steps = result.stats["logprobs"]
    assert len(steps) == result.usage.completion_tokens
    for step in steps:
        values = [lp for _, lp in step]
        assert 1 <= len(step) <= 6 and values == sorted(values, reverse=True) and all(v <= 0 for v in values)
    # at temperature 0 each token is the most likely one
    assert "".join(step[0][0] for step in steps) == result.text


@pytest.mark.slow
def test_real_server_that_reports_no_logprobs_is_found_out(start_openai_server: Callable[..., Any]) -> None:
    with start_openai_server("--logits_all", "False") as (url, _):
        backend = OpenAIBackend("smollm2", base_url=url)
        assert not backend.capabilities.logprobs
        assert backend.chat("Hi", SamplingParams(max_tokens=4)).ok  # it still answers what it is asked
