"""The OpenAI-compatible API, through the official ``openai`` SDK against the app served by uvicorn."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.errors import BackendConnectionError

from .conftest import AppFactory, LiveServer
from .helpers import ANSWER, FACT, FILLER, QUOTE, local_reply, make_pdf, report_pages

QUESTION = "What was revenue in fiscal 2023?"
DOCUMENT = "\n\n".join(f"Paragraph {i}. {FILLER * 2}" + (FACT if i == 5 else "") for i in range(12))


@pytest.fixture
def server(live_server: LiveServer) -> LiveServer:
    return live_server


@pytest.fixture
def client(server: LiveServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def add_report(server: LiveServer) -> None:
    files = {"files": ("report.pdf", make_pdf(report_pages()))}
    assert httpx.post(f"{server.url}/api/documents", files=files).status_code == 200


def test_models_are_the_protocols(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["minions", "minion", "remote", "local", "rag"]


def test_without_a_remote_model_only_local_is_listed_and_the_others_are_a_400(make_local_app: AppFactory) -> None:
    messages = [{"role": "user", "content": f"{DOCUMENT}\n\n{QUESTION}"}]
    with (
        LiveServer(make_local_app()) as server,
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0) as client,
    ):
        assert [m.id for m in client.models.list()] == ["local"]
        for model in ("minions", "rag"):
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(model=model, messages=messages)
            assert refused.value.code == "model_not_available" and refused.value.param == "model"
            assert refused.value.body["message"] == (
                f"The {model} protocol needs a remote model: start minions serve with --remote provider/model "
                "or set MINIONS_REMOTE, or use the model local."
            )
        response = client.chat.completions.create(model="local", messages=messages)
        assert response.model == "local" and response.model_extra["minions"]["egress"] == []
        assert response.model_extra["minions"]["local_egress"] is None


def test_a_completion_over_the_library_with_the_runs_usage(client: openai.OpenAI, server: LiveServer) -> None:
    add_report(server)

    response = client.chat.completions.create(model="minions", messages=[{"role": "user", "content": QUESTION}])

    assert response.object == "chat.completion" and response.model == "minions"
    assert response.choices[0].message.content == ANSWER and response.choices[0].finish_reason == "stop"
    usage = response.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    extra = response.model_extra["minions"]
    assert extra["citations"][0]["text"] == QUOTE and extra["citations"][0]["pages"] == [2]
    assert extra["cost_usd"] > 0 and extra["egress"] and extra["documents"] == ["report.pdf"]
    assert set(extra["usage_by_role"]) == {"local", "remote"}


def test_a_streamed_completion_ends_with_usage_and_done(client: openai.OpenAI, server: LiveServer) -> None:
    add_report(server)

    stream = client.chat.completions.create(
        model="minions",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER and len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)


def test_the_raw_stream_is_server_sent_events_ending_with_done(server: LiveServer) -> None:
    add_report(server)
    body = {"model": "rag", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith(("data: ", ": ")) for line in lines)


@pytest.mark.parametrize("protocol", ["minion", "remote", "local", "rag"])
def test_a_long_message_is_the_document_and_its_last_paragraph_the_question(
    client: openai.OpenAI, protocol: str
) -> None:
    response = client.chat.completions.create(
        model=protocol,
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": f"{DOCUMENT}\n\n{QUESTION}"},
        ],
    )
    extra = response.model_extra["minions"]
    assert extra["documents"] == ["message-2.txt"] and extra["protocol"] == protocol
    assert response.choices[0].message.content  # the local protocol answers from the local model's finding


def test_documents_named_in_the_request_come_from_the_library(client: openai.OpenAI, server: LiveServer) -> None:
    add_report(server)
    files = {"files": ("other.txt", b"Nothing about revenue here.")}
    httpx.post(f"{server.url}/api/documents", files=files)

    response = client.chat.completions.create(
        model="rag", messages=[{"role": "user", "content": QUESTION}], extra_body={"documents": ["report.pdf"]}
    )
    assert response.model_extra["minions"]["documents"] == ["report.pdf"]

    with pytest.raises(openai.NotFoundError, match=r"No document 'nope\.pdf'"):
        client.chat.completions.create(
            model="rag", messages=[{"role": "user", "content": QUESTION}], extra_body={"documents": ["nope.pdf"]}
        )


def test_bad_requests_get_openai_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist") as unknown:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="No documents"):
        client.chat.completions.create(model="minions", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.BadRequestError, match="No user message"):
        client.chat.completions.create(model="minions", messages=[{"role": "system", "content": DOCUMENT}])
    with pytest.raises(openai.BadRequestError, match="end it with a blank line and the question"):
        client.chat.completions.create(model="minions", messages=[{"role": "user", "content": "x" * 3000}])


def test_a_remote_model_that_is_down_is_an_error_streamed_or_not(make_app: AppFactory) -> None:
    def refuse(*_: object) -> str:
        raise BackendConnectionError("connection refused")

    down = ScriptedBackend(
        "scripted/gpt-4o-mini", responder=refuse, capabilities=Capabilities(json_schema=True, local=False)
    )
    app = make_app(ScriptedBackend("scripted/local", responder=local_reply), down)
    messages = [{"role": "user", "content": f"{DOCUMENT}\n\n{QUESTION}"}]
    with LiveServer(app) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as client:
        with pytest.raises(openai.InternalServerError, match="BackendConnectionError: connection refused"):
            client.chat.completions.create(model="minions", messages=messages)
        with pytest.raises(openai.APIError, match="BackendConnectionError: connection refused"):
            list(client.chat.completions.create(model="minions", messages=messages, stream=True))


def test_the_sdk_sends_the_token_as_its_api_key(make_app: AppFactory) -> None:
    with LiveServer(make_app(token="a-long-token-1")) as server:
        with (
            openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong-token", max_retries=0) as client,
            pytest.raises(openai.AuthenticationError),
        ):
            client.models.list()
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key="a-long-token-1", max_retries=0) as client:
            assert len(client.models.list().data) == 5
