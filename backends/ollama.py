"""A model served by a local Ollama server, through the ``ollama`` package.

The server runs on this machine (``local=True``): text sent to it stays here. Ollama reports its own token
counts and timings (in nanoseconds), which become the result's usage and timings. The context window is
sent with every request (``num_ctx``), since Ollama otherwise truncates prompts at its own small default.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import ollama

from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    MinionsError,
    ModelNotFoundError,
)
from minions.tokens import count_tokens
from minions.types import ChatResult, Message, SamplingParams, Timings, Usage, as_messages

from .base import BaseBackend, Capabilities, MessagesLike

__all__ = ["DEFAULT_HOST", "OllamaBackend"]

log = logging.getLogger(__name__)

DEFAULT_HOST = "http://127.0.0.1:11434"
NS = 1e9


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
        self.timeout = timeout
        self.capabilities = Capabilities(
            json_schema=True,
            logprobs=False,
            batching=False,
            streaming=True,
            local=True,
            context_window=context_window,
        )
        extra: dict[str, Any] = {"transport": transport} if transport is not None else {}
        # Building the client opens no connection: a server that is down shows at the first call.
        self._client = ollama.Client(host=self.host, timeout=timeout, **extra)

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
        # ollama turns httpx.ConnectError into the builtin ConnectionError; other httpx errors pass through.
        return BackendConnectionError(
            f"Cannot reach Ollama at {self.host}: start it with `ollama serve` or set OLLAMA_HOST.",
            backend=self.name,
        )

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        start = time.perf_counter()
        try:
            reply = self._client.chat(**self._request(messages, params))
        except (ollama.ResponseError, ConnectionError, httpx.TransportError) as exc:
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
        except (ollama.ResponseError, ConnectionError, httpx.TransportError) as exc:
            raise self._translate(exc) from exc
