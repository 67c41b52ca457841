"""A model served by an Ollama server, through the ``ollama`` package.

The server runs on this machine by default (``http://127.0.0.1:11434``); ``OLLAMA_HOST`` may name another one.
Whether it is on this device (``capabilities.local``) follows from the host (``backends.address``): text sent
to another host leaves the machine, and the protocols record it. Ollama reports its own token
counts and timings (in nanoseconds), which become the result's usage and timings. The context window is
sent with every request (``num_ctx``), since Ollama otherwise truncates prompts at its own small default.

Something else listening at the host (a web server, a proxy's error page) answers with a body the ``ollama``
client cannot read: that is a ``MalformedResponseError`` that names the host and shows what came back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
from pydantic import ValidationError

from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    MalformedResponseError,
    MinionsError,
    ModelNotFoundError,
)
from minions.tokens import count_tokens
from minions.types import ChatResult, Message, SamplingParams, Timings, Usage, as_messages

from .address import on_this_device
from .base import BaseBackend, Capabilities, MessagesLike
from .wire import first_error, glimpse

__all__ = ["DEFAULT_HOST", "OllamaBackend"]

log = logging.getLogger(__name__)

DEFAULT_HOST = "http://127.0.0.1:11434"
NS = 1e9

_FAILURES = (ollama.ResponseError, ConnectionError, httpx.TransportError)
# What the ollama client raises when a body is not Ollama's: not JSON (JSONDecodeError, a ValueError), JSON
# of another shape (pydantic's ValidationError, also a ValueError), or not an object (TypeError from
# ``cls(**body)``, AttributeError from ``body.get`` in a stream). Only the client's own call is wrapped.
_NOT_OLLAMA = (ValueError, TypeError, AttributeError)


class OllamaBackend(BaseBackend):
    """A chat model on an Ollama server (``ollama serve``), by default the one on this machine."""

    def __init__(
        self,
        model: str,
        *,
        host: str | None = None,
        transport: httpx.BaseTransport | None = None,
        context_window: int = 8192,
        timeout: float | None = 600.0,
    ) -> None:
        self.model = model
        self.name = f"ollama/{model}"
        self.host = host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST
        self.address = self.host
        self.timeout = timeout
        self.capabilities = Capabilities(
            json_schema=True,
            logprobs=False,
            batching=False,
            streaming=True,
            local=on_this_device(self.address),
            context_window=context_window,
        )
        extra: dict[str, Any] = {"transport": transport} if transport is not None else {}
        self._seen = threading.local()  # the content type of this thread's last response, for error messages
        # Building the client opens no connection: a server that is down shows at the first call.
        self._client = ollama.Client(host=self.host, timeout=timeout, event_hooks={"response": [self._saw]}, **extra)

    def _saw(self, response: httpx.Response) -> None:
        self._seen.content_type = response.headers.get("content-type")

    def _request(self, messages: list[Message], params: SamplingParams) -> dict[str, Any]:
        """The keyword arguments of ``ollama.Client.chat`` for one call."""
        options: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "num_predict": params.max_tokens,
            "num_ctx": self.capabilities.context_window,
        }
        if params.stop:
            options["stop"] = list(params.stop)
        if params.seed is not None:
            options["seed"] = params.seed
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_dict() for m in messages],
            "options": options,
        }
        if params.json_schema is not None:
            kwargs["format"] = dict(params.json_schema)
        return kwargs

    def _translate(self, exc: Exception) -> MinionsError:
        """Our error for what the ``ollama`` client (or httpx under it) raised; it says what to do."""
        if isinstance(exc, ollama.ResponseError):
            if exc.status_code == 404:
                return ModelNotFoundError(
                    f"Ollama at {self.host} has no model {self.model!r} ({exc.error}): run `ollama pull {self.model}`."
                )
            return BackendError(
                f"Ollama at {self.host} answered HTTP {exc.status_code}: {exc.error}",
                backend=self.name,
                raw=exc.error,
            )
        if isinstance(exc, httpx.TimeoutException):
            return BackendTimeoutError(
                f"Ollama at {self.host} did not answer within {self.timeout}s: "
                "a first call loads the model, so retry, or raise the backend's timeout.",
                backend=self.name,
            )
        if isinstance(exc, _NOT_OLLAMA):
            return self._malformed(exc)
        # ollama turns httpx.ConnectError into the builtin ConnectionError; other httpx errors pass through.
        return BackendConnectionError(
            f"Cannot reach Ollama at {self.host}: start it with `ollama serve` or set OLLAMA_HOST.",
            backend=self.name,
        )

    def _malformed(self, exc: Exception) -> MalformedResponseError:
        """What came back instead of an Ollama reply: its content type and, as far as the error kept it, its start."""
        if isinstance(exc, json.JSONDecodeError):
            why, body = f"not JSON: {exc.msg}", exc.doc
        elif isinstance(exc, ValidationError):
            why, body = first_error(exc), json.dumps(exc.errors(include_url=False)[0].get("input"), default=str)
        else:
            why, body = f"not a JSON object: {exc}", ""
        content_type = getattr(self._seen, "content_type", None)
        return MalformedResponseError(
            f"Ollama at {self.host} answered with something other than an Ollama reply ({why}; "
            f"{glimpse(content_type, body.encode())}): check OLLAMA_HOST (is another server listening there?).",
            content_type=content_type,
            backend=self.name,
            raw=body,
        )

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        start = time.perf_counter()
        request = self._request(messages, params)
        try:
            reply = self._client.chat(**request)
        except (*_FAILURES, *_NOT_OLLAMA) as exc:
            raise self._translate(exc) from exc
        return self._result(reply, messages, time.perf_counter() - start)

    def _result(self, reply: ollama.ChatResponse, messages: list[Message], seconds: float) -> ChatResult:
        text = reply.message.content or ""
        stats: dict[str, Any] = {}
        if reply.prompt_eval_count is None or reply.eval_count is None:
            stats["usage_estimated"] = True
        prompt = reply.prompt_eval_count
        if prompt is None:
            prompt = sum(count_tokens(m.content, self.model) for m in messages)
        completion = reply.eval_count if reply.eval_count is not None else count_tokens(text, self.model)
        total_s = reply.total_duration / NS if reply.total_duration else seconds
        return ChatResult(
            text=text,
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion, calls=1, seconds=total_s),
            finish_reason="length" if reply.done_reason == "length" else "stop",
            timings=Timings(
                total_s=total_s,
                prefill_s=(reply.prompt_eval_duration or 0) / NS,
                decode_s=(reply.eval_duration or 0) / NS,
            ),
            model=self.name,
            stats=stats,
        )

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]:
        """Yield the reply's text as it arrives."""
        kwargs = self._request(as_messages(messages), params or SamplingParams())
        try:
            for part in self._client.chat(**kwargs, stream=True):
                if part.message.content:
                    yield part.message.content
        except (*_FAILURES, *_NOT_OLLAMA) as exc:
            raise self._translate(exc) from exc
