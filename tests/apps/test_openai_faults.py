"""Fault injection over real HTTP: every route and method of the app served by uvicorn, bodies that do not parse,
are too large or too deep or not valid Unicode, and parameters the server does not serve. Each is answered in
OpenAI's error shape, within a bound, and the server still answers afterwards."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from minions.apps import openai_api, web
from minions.apps.config import MAX_JSON_DEPTH, MAX_REQUEST_BYTES, AppConfig
from minions.apps.web import create_app

from .conftest import AppFactory, LiveServer
from .helpers import ANSWER, FACT, scripted_models

QUESTION = "What was revenue in fiscal 2023?"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD")
BOUND_S = 5.0
"""Every refusal comes back within this (a 21 MB body included)."""
JSON = {"content-type": "application/json"}
HOSTILE_BODIES: dict[str, dict[str, Any]] = {
    "unparseable": {"content": b'{"model": "local", "messages": [', "headers": JSON},
    "not an object": {"content": b"[1, 2, 3]", "headers": JSON},
    "empty": {"content": b"", "headers": JSON},
    "not JSON at all": {"content": b"model=local", "headers": {"content-type": "text/plain"}},
    "invalid UTF-8": {"content": b'{"model": "\xff\xfe\xc0", "messages": "\xed\xa0\x80"}', "headers": JSON},
    "escaped surrogates": {"content": b'{"question": "\\ud800 \\udc80?"}', "headers": JSON},
    "too deep": {"content": b"[" * 100_000 + b"]" * 100_000, "headers": JSON},
    "deep in an object": {"content": b'{"a": ' * 40 + b"1" + b"}" * 40, "headers": JSON},
    "too large": {"content": b'{"model": "' + b"x" * (MAX_REQUEST_BYTES + 1) + b'"}', "headers": JSON},
    "too large, chunked": {"content": iter([b'{"m": "', *[b"x" * 1_048_576] * 17, b'"}']), "headers": JSON},
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    local, remote = scripted_models()
    return create_app(AppConfig(data_dir=tmp_path_factory.mktemp("data")), local=local, remote=remote)


@pytest.fixture(scope="module")
def server(app: FastAPI) -> Iterator[LiveServer]:
    with LiveServer(app) as s:
        yield s


def api_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route of the app's routers, a made-up value in each path parameter."""
    found = [r for router in (openai_api.router, web.api, app.router) for r in router.routes if isinstance(r, APIRoute)]
    return sorted({(m, re.sub(r"\{[^}]+\}", "nope", r.path)) for r in found for m in r.methods})


def routes(app: FastAPI) -> list[str]:
    """Every route's path, and some that are none."""
    paths = {path for _, path in api_routes(app)}
    assert {"/v1/models", "/v1/chat/completions", "/api/settings", "/"} <= paths
    return sorted({*paths, "/static/nope.js", "/nope", "/v1/nope", "/v1/chat/completions/nope"})


def assert_openai_error(response: httpx.Response, status: int | None = None) -> dict[str, Any]:
    assert response.status_code >= 400 and (status is None or response.status_code == status), response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["type"] == ("server_error" if response.status_code >= 500 else "invalid_request_error")
    return dict(body["error"])


def send(server: LiveServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    started = time.monotonic()
    response = httpx.request(method, server.url + path, timeout=BOUND_S * 2, **kwargs)
    assert time.monotonic() - started < BOUND_S, f"{method} {path} took {time.monotonic() - started:.1f} s"
    assert httpx.get(f"{server.url}/v1/models", timeout=BOUND_S).status_code == 200  # alive
    return response


def test_every_route_and_method_answers_errors_in_openais_shape(app: FastAPI, server: LiveServer) -> None:
    seen = set()
    for path in routes(app):
        for method in METHODS:
            response = send(server, method, path)
            seen.add(response.status_code)
            if method == "HEAD" or response.status_code < 400:
                continue
            assert response.status_code in (400, 404, 405, 422), (method, path, response.text)
            error = assert_openai_error(response)
            if response.status_code == 405:
                assert error["code"] == "method_not_allowed" and response.headers["allow"] in error["message"]
    assert {200, 400, 404, 405} <= seen


@pytest.mark.parametrize("kind", HOSTILE_BODIES)
def test_hostile_bodies_on_every_route_that_takes_one(kind: str, app: FastAPI, server: LiveServer) -> None:
    writes = [(method, path) for method, path in api_routes(app) if method in ("POST", "PUT")]
    assert ("POST", "/v1/chat/completions") in writes and ("PUT", "/api/settings") in writes
    for method, path in writes:
        body = dict(HOSTILE_BODIES[kind])
        if isinstance(body["content"], Iterator):  # a generator is spent by one request
            body["content"] = iter([b'{"m": "', *[b"x" * 1_048_576] * 17, b'"}'])
        response = send(server, method, path, **body)
        if path == "/api/documents":  # uploads are multipart, with their own limit
            assert_openai_error(response)
            continue
        if (method, path) == ("POST", "/api/conversations") and not kind.startswith(("too", "deep")):
            assert response.status_code == 200  # it reads no body: a new conversation
            continue
        if kind.startswith("too large"):
            error = assert_openai_error(response, 413)
            assert error["code"] == "request_too_large" and "16 MB" in error["message"]
        elif kind.startswith(("too deep", "deep in")):
            error = assert_openai_error(response, 400)
            assert error["code"] == "too_deep" and str(MAX_JSON_DEPTH) in error["message"]
        elif kind == "escaped surrogates" and path == "/api/conversations/nope/messages":
            assert_openai_error(response, 404)  # the body was valid text once replaced; the conversation is not
        else:
            assert response.status_code in (400, 404, 422), response.text
            assert_openai_error(response)


def test_a_body_that_does_not_parse_says_where(server: LiveServer) -> None:
    response = send(server, "POST", "/v1/chat/completions", content=b'{"model": "local",', headers=JSON)
    assert assert_openai_error(response, 400)["message"] == (
        "The request body is not valid JSON: Expecting property name enclosed in double quotes (at character 18)."
    )
    response = send(server, "POST", "/v1/chat/completions", content=b'{"model": "local"}', headers=JSON)
    error = assert_openai_error(response, 400)
    assert error["param"] == "messages" and "messages: Field required" in error["message"]


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(server: LiveServer) -> None:
    """The client says 21 MB and sends nothing: the reply comes at once, without waiting for the body."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND_S) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 21000000\r\n\r\n")  # fmt: skip
        # the server closes after its reply, which may come in more than one piece (headers, then the body)
        pieces = []
        while piece := s.recv(4096):
            pieces.append(piece)
        reply = b"".join(pieces).decode()
    assert reply.startswith("HTTP/1.1 413") and '"request_too_large"' in reply


def test_a_client_that_sends_its_whole_oversized_body_reads_the_413(server: LiveServer) -> None:
    """21 MB sent in full over a 16 MB limit: the server reads the rest and throws it away, so the client's writes
    all go through and it reads the error, instead of seeing its connection reset mid-body."""
    import socket

    size = 21_000_000
    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND_S) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {size}\r\n\r\n".encode())  # fmt: skip
        block = b"x" * 1_048_576
        for start in range(0, size, len(block)):
            s.sendall(block[: size - start])
        pieces = []
        while piece := s.recv(4096):
            pieces.append(piece)
        reply = b"".join(pieces).decode()
    assert reply.startswith("HTTP/1.1 413") and '"request_too_large"' in reply and "16 MB" in reply


def test_the_sdk_reads_the_errors(server: LiveServer) -> None:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30) as client:
        with pytest.raises(openai.NotFoundError, match="No route /v1/nope"):
            client.get("/nope", cast_to=dict)
        with pytest.raises(openai.APIStatusError, match="DELETE is not allowed") as refused:
            client.delete("/models", cast_to=dict)
        assert refused.value.status_code == 405
        with pytest.raises(openai.APIStatusError, match="larger than the limit") as refused:
            client.chat.completions.create(model="local", messages=[{"role": "user", "content": "x" * 17_000_000}])
        assert refused.value.status_code == 413


UNSUPPORTED: dict[str, tuple[dict[str, Any], str]] = {
    "tools": ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "Tools are not"),
    "tool_choice": ({"tool_choice": "required"}, "tool_choice is not supported"),
    "n": ({"n": 2}, "n must be 1"),
    "logit_bias": ({"logit_bias": {"50256": -100}}, "logit_bias is not supported"),
    "logprobs": ({"logprobs": True, "top_logprobs": 3}, "logprobs are not supported"),
    "response_format": ({"response_format": {"type": "json_object"}}, "response_format must be text"),
    "modalities": ({"modalities": ["text", "audio"]}, "Only text is supported"),
}


@pytest.mark.parametrize("param", UNSUPPORTED)
def test_what_the_server_does_not_do_is_a_400_that_says_so(param: str, server: LiveServer) -> None:
    fields, message = UNSUPPORTED[param]
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30) as client:
        with pytest.raises(openai.BadRequestError, match=message) as refused:
            client.chat.completions.create(model="local", messages=[{"role": "user", "content": QUESTION}], **fields)
        assert refused.value.param == param and refused.value.code == "unsupported_parameter"
        # what it does not use is accepted: a run makes many model calls, with its own settings
        text = {"role": "system", "content": FACT}
        response = client.chat.completions.create(
            model="local", messages=[text, {"role": "user", "content": QUESTION}], temperature=0.2, max_tokens=50,
            response_format={"type": "text"}, tool_choice="none",
        )  # fmt: skip
        assert response.choices[0].message.content


def test_a_short_document_in_the_system_message_is_used_when_nothing_else_is(make_local_app: AppFactory) -> None:
    with (
        LiveServer(make_local_app()) as server,
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0) as client,
    ):
        messages = [{"role": "system", "content": f"Annual report. {FACT}"}, {"role": "user", "content": QUESTION}]
        response = client.chat.completions.create(model="local", messages=messages)
        extra = response.model_extra["minions"]
        assert extra["documents"] == ["message-1.txt"] and extra["citations"][0]["text"] == FACT
        assert "the earlier messages (message-1.txt) were read as the documents" in extra["notes"][0]
        assert ANSWER.split(" was ")[1].rstrip(".") in response.choices[0].message.content
        with pytest.raises(openai.BadRequestError, match="No documents: put a document in the messages"):
            client.chat.completions.create(model="local", messages=messages[1:])


def test_text_that_is_not_valid_unicode_is_replaced_and_said(make_local_app: AppFactory) -> None:
    body = (
        b'{"model": "local", "messages": [{"role": "system", "content": "Annual report \\ud800 \xff. '
        + FACT.encode()
        + b'"}, {"role": "user", "content": [{"type": "text", "text": "What was revenue in fiscal 2023? \\udc80"}]}]}'
    )
    with LiveServer(make_local_app()) as server:
        response = httpx.post(f"{server.url}/v1/chat/completions", content=body, headers=JSON, timeout=30)
        assert response.status_code == 200, response.text
        extra = response.json()["minions"]
        assert extra["notes"][0] == (
            "Replaced 3 characters of the request that are not valid Unicode (unpaired surrogates, NUL) with U+FFFD."
        )
        assert extra["citations"][0]["text"] == FACT


def test_an_unexpected_failure_is_a_500_in_openais_shape(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    def broken() -> list[Any]:
        raise RuntimeError("disk on fire")

    app.state.minions.library.records = broken
    with LiveServer(app) as server:
        response = send(server, "POST", "/v1/chat/completions", json={"model": "minions", "messages": [
            {"role": "user", "content": QUESTION}]})  # fmt: skip
        error = assert_openai_error(response, 500)
        assert error["code"] == "internal_error" and "RuntimeError" in error["message"]
        assert "disk on fire" not in error["message"]  # the log has it, not the client
    # one line in the server's log, no traceback on its console
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in failed] == ["POST /v1/chat/completions failed: RuntimeError: disk on fire"]
    assert not any(r.exc_info for r in failed)


def test_an_uploads_errors_name_the_upload_not_the_servers_copy(server: LiveServer) -> None:
    broken = {"files": ("annual-report.pdf", b"%PDF-1.4\n" + b"\x00garbage" * 100)}
    response = send(server, "POST", "/api/documents", files=broken)
    error = assert_openai_error(response, 422)
    assert error["message"].startswith("annual-report.pdf is not a readable PDF"), error
    assert "/library/" not in error["message"] and ".pdf is not" in error["message"]
