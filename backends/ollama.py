"""A model served by an Ollama server, through the ``ollama`` package.

The server runs on this machine by default (``http://127.0.0.1:11434``); ``OLLAMA_HOST`` may name another one.
Whether it is on this device (``capabilities.local``) follows from the host (``backends.address``): text sent
to another host leaves the machine, and the protocols record it. Ollama reports its own token
counts and timings (in nanoseconds), which become the result's usage and timings.

Ollama cuts a prompt longer than its context window (``num_ctx``, 2048-4096 tokens by default) without a word,
so every request carries a ``num_ctx`` that fits the prompt and the reply (``context_for``): at least the
backend's ``context_window``, more for a longer prompt, in steps of ``CONTEXT_STEP`` so that a batch's jobs
share one value (Ollama reloads the model when it changes). A prompt beyond what the model was trained for
(``/api/show``) is a ``ContextLengthError``, never a truncated reply.

Newer Ollama servers report log-probabilities (``logprobs``, ``top_logprobs``), older ones ignore the request for
them: whether this one does is asked once, by a one-token request, the first time the capabilities are read.

``batch`` sends its jobs concurrently, at most ``OLLAMA_NUM_PARALLEL`` at once (the variable the server reads
for the same purpose; default ``DEFAULT_NUM_PARALLEL``), after one ``/api/show`` that says whether the model is
there (``ollama pull NAME`` if not) and how long its context is.

Something else listening at the host (a web server, a proxy's error page) answers with a body the ``ollama``
client cannot read: that is a ``MalformedResponseError`` that names the host and shows what came back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import ollama
from pydantic import ValidationError

from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    ContextLengthError,
    MalformedResponseError,
    MinionsError,
    ModelNotFoundError,
)
from minions.events import CancelToken
from minions.tokens import TOKEN_MARGIN, count_tokens
from minions.types import ChatRequest, ChatResult, Message, SamplingParams, Timings, Usage, as_messages

from .address import on_this_device
from .base import PROBE, AskingBackend, Capabilities, MessagesLike, OnResult
from .model_files import size_from_label
from .settings import count_from_env
from .wire import first_error, glimpse, logprob_steps

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_NUM_PARALLEL",
    "NUM_PARALLEL_ENV",
    "OllamaBackend",
    "answered_error",
    "num_parallel",
    "ollama_host",
    "unreachable",
]

log = logging.getLogger(__name__)

DEFAULT_HOST = "http://127.0.0.1:11434"
NS = 1e9

NUM_PARALLEL_ENV = "OLLAMA_NUM_PARALLEL"
DEFAULT_NUM_PARALLEL = 4
"""Jobs of a batch in flight at once when ``OLLAMA_NUM_PARALLEL`` is unset (Ollama's own default when memory
allows; a server that takes fewer queues the rest)."""
CONTEXT_STEP = 4096
"""``num_ctx`` grows in steps of this many tokens."""
MESSAGE_OVERHEAD = 8
"""Tokens the chat template adds per message (role markers)."""
MAX_TOP_LOGPROBS = 20
"""The most alternatives per token Ollama reports (``top_logprobs``)."""


def ollama_host() -> str:
    """``OLLAMA_HOST``, else ``DEFAULT_HOST`` (this machine)."""
    return os.environ.get("OLLAMA_HOST") or DEFAULT_HOST


def num_parallel() -> int:
    """``OLLAMA_NUM_PARALLEL``, else ``DEFAULT_NUM_PARALLEL``."""
    return count_from_env(NUM_PARALLEL_ENV, DEFAULT_NUM_PARALLEL, "jobs")


_FAILURES = (ollama.ResponseError, ConnectionError, httpx.TransportError)
# What the ollama client raises when a body is not Ollama's: not JSON (JSONDecodeError, a ValueError), JSON
# of another shape (pydantic's ValidationError, also a ValueError), or not an object (TypeError from
# ``cls(**body)``, AttributeError from ``body.get`` in a stream). Only the client's own call is wrapped.
_NOT_OLLAMA = (ValueError, TypeError, AttributeError)


def answered_error(exc: ollama.ResponseError, host: str, model: str, backend: str) -> MinionsError:
    """Our error for an Ollama server's error reply: a missing model says to pull it."""
    if exc.status_code == 404:
        return ModelNotFoundError(f"Ollama at {host} has no model {model!r} ({exc.error}): run `ollama pull {model}`.")
    message = f"Ollama at {host} answered HTTP {exc.status_code}: {exc.error}"
    return BackendError(message, backend=backend, raw=exc.error)


def unreachable(host: str, backend: str) -> BackendConnectionError:
    """No Ollama server answers at ``host`` (ollama turns httpx.ConnectError into the builtin ConnectionError;
    other httpx errors pass through)."""
    return BackendConnectionError(
        f"Cannot reach Ollama at {host}: start it with `ollama serve` or set OLLAMA_HOST.", backend=backend
    )


class OllamaBackend(AskingBackend):
    """A chat model on an Ollama server (``ollama serve``), by default the one on this machine."""

    def __init__(
        self,
        model: str,
        *,
        host: str | None = None,
        transport: httpx.BaseTransport | None = None,
        context_window: int = 8192,
        timeout: float | None = 600.0,
        parallel: int | None = None,
    ) -> None:
        self.model = model
        self.name = f"ollama/{model}"
        self.host = host or ollama_host()
        self.address = self.host
        self.timeout = timeout
        self.max_concurrency = parallel if parallel is not None else num_parallel()
        self._checked = False  # whether /api/show was asked (once per backend)
        self._trained_context: int | None = None  # the model's own context length, from /api/show
        self._parameters: int | None = None  # the model's parameters, from /api/show
        capabilities = Capabilities(
            json_schema=True,
            logprobs=False,  # until the server says (Ollama's releases since late 2025 report them)
            batching=self.max_concurrency > 1,
            streaming=True,
            local=on_this_device(self.address),
            context_window=context_window,
        )
        self._declare(capabilities, ask=True)
        extra: dict[str, Any] = {"transport": transport} if transport is not None else {}
        self._seen = threading.local()  # the content type of this thread's last response, for error messages
        # Building the client opens no connection: a server that is down shows at the first call.
        self._client = ollama.Client(host=self.host, timeout=timeout, event_hooks={"response": [self._saw]}, **extra)

    def _reports_logprobs(self) -> bool:
        """Whether the server answers a request for log-probabilities with them (one token; the same ``num_ctx``
        as a job's, so that the model it loads is the one the jobs use). A server that cannot be asked counts as
        one that does not report them."""
        try:
            reply = self._client.chat(**self._request(list(PROBE.messages), PROBE.params))
        except (*_FAILURES, *_NOT_OLLAMA) as exc:
            log.info("Ollama at %s: no log-probabilities (%s: %s)", self.host, type(exc).__name__, exc)
            return False
        reports = bool(reply.logprobs)
        log.info("Ollama at %s %s log-probabilities", self.host, "reports" if reports else "does not report")
        return reports

    def _saw(self, response: httpx.Response) -> None:
        self._seen.content_type = response.headers.get("content-type")

    def needed_tokens(self, messages: Sequence[Message], params: SamplingParams) -> int:
        """Tokens the prompt and the reply may take, counted generously (see ``TOKEN_MARGIN``)."""
        prompt = sum(count_tokens(m.content, self.model) + MESSAGE_OVERHEAD for m in messages)
        return int(prompt * TOKEN_MARGIN) + params.max_tokens

    def context_for(self, needed: int) -> int:
        """The ``num_ctx`` for a job of ``needed`` tokens: ``context_window``, or more in steps of ``CONTEXT_STEP``.
        More than the model was trained for is a ``ContextLengthError``."""
        window = self._capabilities.context_window
        num_ctx = window if needed <= window else -(-needed // CONTEXT_STEP) * CONTEXT_STEP
        trained = self._trained_context
        if trained is not None and num_ctx > trained:
            if needed > trained:
                raise ContextLengthError(
                    f"The prompt needs about {needed} tokens but {self.model} on Ollama at {self.host} holds "
                    f"{trained}: send less text, or smaller chunks.",
                    window=trained,
                    backend=self.name,
                )
            num_ctx = trained
        return num_ctx

    def check_model(self) -> int | None:
        """Ask the server about the model once: raises ``ModelNotFoundError`` (run ``ollama pull``) when it is
        not there; returns its trained context length when the server reports one. A server that cannot say
        (down, or a proxy that passes only ``/api/chat``) is asked again next time; the call itself will tell."""
        if self._checked:
            return self._trained_context
        try:
            info = self._client.show(self.model)
        except (*_FAILURES, *_NOT_OLLAMA) as exc:
            if isinstance(exc, ollama.ResponseError) and exc.status_code == 404:
                raise self._translate(exc) from exc
            log.info("Ollama at %s did not describe %s: %s", self.host, self.model, exc)
            return None
        lengths = [v for k, v in (info.modelinfo or {}).items() if k.endswith(".context_length") and isinstance(v, int)]
        self._trained_context = max(lengths) if lengths else None
        count = (info.modelinfo or {}).get("general.parameter_count")
        size = info.details.parameter_size if info.details is not None else None
        self._parameters = count if isinstance(count, int) else size_from_label(size) if size else None
        self._checked = True
        return self._trained_context

    def parameter_count(self) -> int | None:
        """The model's parameters as the server describes it (``/api/show``: ``general.parameter_count``, else
        ``details.parameter_size`` such as "3.2B"); None where it does not."""
        self.check_model()
        return self._parameters

    def _request(self, messages: list[Message], params: SamplingParams, num_ctx: int | None = None) -> dict[str, Any]:
        """The keyword arguments of ``ollama.Client.chat`` for one call. ``num_ctx`` (a batch's) is used when the
        job fits it; otherwise the job gets its own."""
        needed = self.needed_tokens(messages, params)
        options: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "num_predict": params.max_tokens,
            "num_ctx": num_ctx if num_ctx is not None and needed <= num_ctx else self.context_for(needed),
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
        if params.logprobs > 0:
            kwargs.update(logprobs=True, top_logprobs=min(params.logprobs, MAX_TOP_LOGPROBS))
        return kwargs

    def _translate(self, exc: Exception) -> MinionsError:
        """Our error for what the ``ollama`` client (or httpx under it) raised; it says what to do."""
        if isinstance(exc, ollama.ResponseError):
            return answered_error(exc, self.host, self.model, self.name)
        if isinstance(exc, httpx.TimeoutException):
            return BackendTimeoutError(
                f"Ollama at {self.host} did not answer within {self.timeout}s: "
                "a first call loads the model, so retry, or raise the backend's timeout.",
                backend=self.name,
            )
        if isinstance(exc, _NOT_OLLAMA):
            return self._malformed(exc)
        return unreachable(self.host, self.name)

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

    def _chat(self, messages: list[Message], params: SamplingParams, num_ctx: int | None = None) -> ChatResult:
        start = time.perf_counter()
        self.check_model()
        request = self._request(messages, params, num_ctx)
        try:
            reply = self._client.chat(**request)
        except (*_FAILURES, *_NOT_OLLAMA) as exc:
            raise self._translate(exc) from exc
        return self._result(reply, messages, time.perf_counter() - start)

    def batch(
        self, requests: Sequence[ChatRequest], *, on_result: OnResult | None = None, cancel: CancelToken | None = None
    ) -> list[ChatResult]:
        """The jobs, at most ``max_concurrency`` in flight, all with the ``num_ctx`` that fits the longest (one
        value, so that Ollama keeps one copy of the model loaded). A missing model raises ``ModelNotFoundError``
        before any job is sent; a job too long for the model fails alone."""
        trained = self.check_model() if requests else None
        needed = max((self.needed_tokens(list(r.messages), r.params) for r in requests), default=0)
        # Sized for the longest job that fits the model; a longer one fails alone, with the reason.
        num_ctx = self.context_for(min(needed, trained) if trained is not None else needed)
        return self._run_batch(requests, lambda m, p: self._chat(m, p, num_ctx), on_result, cancel)

    def _result(self, reply: ollama.ChatResponse, messages: list[Message], seconds: float) -> ChatResult:
        text = reply.message.content or ""
        stats: dict[str, Any] = {}
        if reply.prompt_eval_count is None or reply.eval_count is None:
            stats["usage_estimated"] = True
        prompt = reply.prompt_eval_count
        if prompt is None:
            prompt = sum(count_tokens(m.content, self.model) for m in messages)
        completion = reply.eval_count if reply.eval_count is not None else count_tokens(text, self.model)
        if reply.logprobs:
            stats["logprobs"] = logprob_steps(reply.logprobs)
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
