"""OllamaBackend against Ollama's documented HTTP API (/api/chat), served by an httpx.MockTransport.

One test talks to a real Ollama server; it is marked ``live`` (set OLLAMA_HOST and OLLAMA_TEST_MODEL).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from minions.backends.ollama import OllamaBackend
from minions.errors import BackendConnectionError, BackendError, ModelNotFoundError
from minions.types import ChatRequest, Message, SamplingParams

HOST = "http://ollama.test:11434"

# A non-streaming /api/chat reply, as the Ollama API documentation shows it (durations in nanoseconds).
CHAT_REPLY: dict[str, Any] = {
    "model": "llama3.2",
    "created_at": "2025-01-01T00:00:00Z",
    "message": {"role": "assistant", "content": "Paris."},
    "done": True,
    "done_reason": "stop",
    "total_duration": 5_000_000_000,
    "load_duration": 1_000_000_000,
    "prompt_eval_count": 26,
    "prompt_eval_duration": 1_500_000_000,
    "eval_count": 3,
    "eval_duration": 2_000_000_000,
}

SHOW_REPLY: dict[str, Any] = {"details": {"family": "llama"}, "model_info": {"llama.context_length": 131072}}


def make_backend(handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> OllamaBackend:
    return OllamaBackend("llama3.2", host=HOST, transport=httpx.MockTransport(handler), **kwargs)


class Recorder:
    """A handler that answers every request with ``response`` and keeps the requests it saw."""

    def __init__(self, status: int = 200, body: Any = None) -> None:
        self.status, self.body = status, CHAT_REPLY if body is None else body
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show" and self.status == 200:
            return httpx.Response(200, json=SHOW_REPLY)
        self.requests.append(request)
        return httpx.Response(self.status, json=self.body)

    @property
    def sent(self) -> dict[str, Any]:
        return json.loads(self.requests[-1].content)


@pytest.mark.parametrize(
    ("show", "parameters"),
    [
        ({"details": {"parameter_size": "3.2B"}, "model_info": {"general.parameter_count": 3212749888}}, 3212749888),
        ({"details": {"parameter_size": "3.2B"}, "model_info": {}}, 3_200_000_000),  # an older server: the label
        (SHOW_REPLY, None),
    ],
)
def test_the_model_size_is_the_one_the_server_describes(show: dict[str, Any], parameters: int | None) -> None:
    backend = make_backend(lambda request: httpx.Response(200, json=show))
    assert backend.parameter_count() == parameters


def test_chat_sends_model_messages_and_options() -> None:
    server = Recorder()
    backend = make_backend(server, context_window=4096)
    params = SamplingParams(temperature=0.2, top_p=0.9, max_tokens=64, stop=("\n\n",), seed=7)
    backend.chat([Message("system", "Be brief."), Message("user", "Capital of France?")], params)

    request = server.requests[-1]
    assert request.method == "POST"
    assert request.url == f"{HOST}/api/chat"
    sent = server.sent
    assert sent["model"] == "llama3.2"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
    ]
    assert sent["stream"] is False
    assert sent["options"] == {
        "temperature": 0.2,
        "top_p": 0.9,
        "num_predict": 64,
        "num_ctx": 4096,
        "stop": ["\n\n"],
        "seed": 7,
    }
    assert "format" not in sent


def test_chat_parses_text_usage_and_timings() -> None:
    result = make_backend(Recorder()).chat("Capital of France?")
    assert result.ok
    assert result.text == "Paris."
    assert result.finish_reason == "stop"
    assert result.model == "ollama/llama3.2"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.calls) == (26, 3, 1)
    assert result.usage.cost_usd == 0.0
    assert result.usage.seconds == pytest.approx(5.0)
    assert result.timings.total_s == pytest.approx(5.0)
    assert result.timings.prefill_s == pytest.approx(1.5)
    assert result.timings.decode_s == pytest.approx(2.0)
    assert "usage_estimated" not in result.stats


def test_defaults_omit_stop_and_seed() -> None:
    server = Recorder()
    make_backend(server).chat("hi")
    options = server.sent["options"]
    assert "stop" not in options and "seed" not in options
    assert options["temperature"] == 0.0 and options["num_ctx"] == 8192


def test_json_schema_becomes_format() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    server = Recorder(body={**CHAT_REPLY, "message": {"role": "assistant", "content": '{"city": "Paris"}'}})
    result = make_backend(server).chat("Capital of France?", SamplingParams(json_schema=schema))
    assert server.sent["format"] == schema
    assert json.loads(result.text) == {"city": "Paris"}


# Ollama's /api/chat with "logprobs": true and "top_logprobs": n (releases since late 2025)
LOGPROBS = [
    {
        "token": "Paris",
        "logprob": -0.1,
        "top_logprobs": [{"token": "Lyon", "logprob": -3.0}, {"token": "Paris", "logprob": -0.1}],
    },
    {"token": ".", "logprob": -0.01, "top_logprobs": []},
]


def test_logprobs_are_asked_for_and_read_most_likely_first() -> None:
    server = Recorder(body={**CHAT_REPLY, "logprobs": LOGPROBS})
    result = make_backend(server).chat("Capital of France?", SamplingParams(logprobs=50))
    assert server.sent["logprobs"] is True and server.sent["top_logprobs"] == 20
    assert result.stats["logprobs"] == [[["Paris", -0.1], ["Lyon", -3.0]], [[".", -0.01]]]
    make_backend(server).chat("hi")
    assert "logprobs" not in server.sent and "top_logprobs" not in server.sent


@pytest.mark.parametrize(("body", "reports"), [({**CHAT_REPLY, "logprobs": LOGPROBS}, True), (CHAT_REPLY, False)])
def test_the_server_is_asked_once_whether_it_reports_logprobs(body: dict[str, Any], reports: bool) -> None:
    server = Recorder(body=body)
    backend = make_backend(server)
    assert server.requests == []  # building the backend asks nothing
    assert backend.capabilities.logprobs is reports and backend.capabilities.logprobs is reports
    assert len(server.requests) == 1
    asked = server.sent
    assert asked["logprobs"] is True and asked["options"]["num_predict"] == 1
    assert asked["options"]["num_ctx"] == backend.capabilities.context_window  # the jobs' num_ctx: no reload


def test_a_server_that_cannot_be_asked_reports_no_logprobs() -> None:
    assert make_backend(Recorder(500, {"error": "boom"})).capabilities.logprobs is False


def test_length_finish_reason() -> None:
    server = Recorder(body={**CHAT_REPLY, "done_reason": "length"})
    assert make_backend(server).chat("hi").finish_reason == "length"


def test_missing_counts_are_estimated() -> None:
    body = {k: v for k, v in CHAT_REPLY.items() if k not in ("prompt_eval_count", "eval_count")}
    result = make_backend(Recorder(body=body)).chat("Capital of France?")
    assert result.stats["usage_estimated"] is True
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0


def test_unknown_model_says_to_pull_it() -> None:
    server = Recorder(404, {"error": "model 'llama3.2' not found"})
    with pytest.raises(ModelNotFoundError, match=r"ollama pull llama3\.2"):
        make_backend(server).chat("hi")


def test_server_error_is_a_backend_error() -> None:
    server = Recorder(500, {"error": "llama runner process has terminated"})
    with pytest.raises(BackendError, match="terminated") as info:
        make_backend(server).chat("hi")
    assert info.value.backend == "ollama/llama3.2"


def test_connection_refused_says_how_to_start_ollama() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(BackendConnectionError, match=r"ollama serve.*OLLAMA_HOST") as info:
        make_backend(refuse).chat("hi")
    assert HOST in str(info.value)


def test_batch_keeps_failures_as_results() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    results = make_backend(refuse).batch([ChatRequest([Message("user", "hi")])])
    assert results[0].finish_reason == "error" and "BackendConnectionError" in (results[0].error or "")


def test_stream_yields_pieces() -> None:
    parts = [
        {"model": "llama3.2", "message": {"role": "assistant", "content": piece}, "done": False}
        for piece in ("Pa", "ris", ".")
    ] + [{**CHAT_REPLY, "message": {"role": "assistant", "content": ""}}]

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, content="\n".join(json.dumps(p) for p in parts).encode())

    assert list(make_backend(handler).stream("Capital of France?")) == ["Pa", "ris", "."]


def test_stream_translates_errors() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(BackendConnectionError):
        list(make_backend(refuse).stream("hi"))


def test_host_from_environment_and_another_host_is_not_this_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "http://elsewhere:1234")
    backend = OllamaBackend("m")
    assert backend.host == backend.address == "http://elsewhere:1234"
    assert not backend.capabilities.local and backend.capabilities.json_schema


@pytest.mark.parametrize("host", [None, "http://127.0.0.1:11434", "localhost:11434", "http://[::1]:11434", "0.0.0.0"])
def test_a_server_on_this_machine_is_on_this_device(monkeypatch: pytest.MonkeyPatch, host: str | None) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert OllamaBackend("m", host=host).capabilities.local


@pytest.fixture
def live_ollama() -> OllamaBackend:
    """The real Ollama server (OLLAMA_HOST, default this machine) with OLLAMA_TEST_MODEL (default smollm2:135m);
    the test is skipped, saying how to run it, where no Ollama answers."""
    from minions.backends.ollama import ollama_host

    try:
        httpx.get(f"{ollama_host()}/api/version", timeout=2.0).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.skip(f"no Ollama server at {ollama_host()} ({exc}): run `ollama serve` and pull OLLAMA_TEST_MODEL")
    return OllamaBackend(os.environ.get("OLLAMA_TEST_MODEL", "smollm2:135m"))


@pytest.mark.live
def test_real_ollama_server(live_ollama: OllamaBackend) -> None:
    """Needs `ollama serve` and a pulled model: OLLAMA_TEST_MODEL (default smollm2:135m)."""
    backend = live_ollama
    result = backend.chat("Say hello.", SamplingParams(max_tokens=16))
    assert result.text.strip()
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    assert result.timings.total_s > 0


@pytest.mark.live
def test_real_ollama_server_scores_a_job_where_it_reports_logprobs(live_ollama: OllamaBackend) -> None:
    """Needs `ollama serve` and a pulled model (OLLAMA_TEST_MODEL, default smollm2:135m). A server that reports
    log-probabilities scores the demo's jobs by them; one that does not (an older release) takes the schema path;
    either way the question is answered with its quote."""
    from pathlib import Path

    from minions.documents import load_document
    from minions.protocols import LocalOnly

    backend = live_ollama
    scores = backend.capabilities.logprobs
    if scores:
        result = backend.chat("Which is larger, 3 or 5?", SamplingParams(max_tokens=4, logprobs=5))
        assert result.stats["logprobs"] and all(len(step) >= 1 for step in result.stats["logprobs"])
    demo = load_document(Path(__file__).resolve().parents[2] / "examples" / "northwind-annual-report-2025.md")
    run = LocalOnly(backend).run("What was Northwind's total revenue in 2025?", [demo])
    assert run.jobs and all(job.ok for job in run.jobs), [job.error for job in run.jobs]
    assert all((job.score is not None) is scores for job in run.jobs if job.attempts)  # the others: by words


@pytest.mark.live
def test_real_ollama_server_runs_a_batch_in_parallel(live_ollama: OllamaBackend) -> None:
    """Needs `ollama serve` and a pulled model (OLLAMA_TEST_MODEL, default smollm2:135m); OLLAMA_NUM_PARALLEL as
    the server has it."""
    backend = live_ollama
    jobs = [ChatRequest([Message("user", f"Say the number {i}.")], SamplingParams(max_tokens=8)) for i in range(6)]
    results = backend.batch(jobs)
    assert all(r.ok and r.text.strip() for r in results), [r.error for r in results]
    assert backend.check_model() is None or backend.check_model() > 0  # the server described the model


@pytest.mark.live
def test_real_ollama_server_writes_an_answer_that_stands_on_its_quotes_or_is_replaced(
    live_ollama: OllamaBackend,
) -> None:
    """Needs `ollama serve` and a pulled model (OLLAMA_TEST_MODEL, default smollm2:135m). The server describes the
    model's size (``/api/show``), and the answer it writes (forced: a 135M model would quote) streams and stands
    only where its cited quotes state its figures and names; else the quote answer, with the figure, replaces it."""
    from pathlib import Path

    from minions.documents import load_document
    from minions.events import AnswerToken, Event
    from minions.protocols import LocalOnly
    from minions.protocols.evidence.written import unsupported

    backend = live_ollama
    assert (backend.parameter_count() or 0) > 0
    demo = load_document(Path(__file__).resolve().parents[2] / "examples" / "northwind-annual-report-2025.md")
    question = "What was Northwind's total revenue in 2025?"
    events: list[Event] = []
    run = LocalOnly(backend, answer="write").run(question, [demo], events=events.append)
    record = run.reading["answer"]
    assert record["written"] == "".join(e.text for e in events if isinstance(e, AnswerToken)).strip()
    if record["replaced"]:
        assert "$31.8 million" in run.answer and record["why"] in run.notes[-1]
    else:
        cited = [run.citations[n - 1] for n in record["cited"]]
        assert cited and unsupported(run.answer, [question, *(c.text for c in cited), demo.name]) == []
