"""The way to an OpenAI-compatible server, through the official ``openai`` SDK: its clients, the time a request may
take, retries, the requests in flight at once, and its errors translated into the minions tree. What a request
says (the chat semantics: the model's capabilities, the schema's form) is ``backends.openai``'s.

One SDK client is built per transport (lazily, with the key read at the first call) and the SDK's own retries are
off: we retry rate limits and transient failures here, with exponential backoff and jitter, and translate the SDK's
errors at this boundary.

The SDK hands us the raw response and we read it ourselves: a server (or a proxy in front of it) may answer
HTTP 200 with an HTML page, JSON cut off mid-way or a completion without choices, and the reply is validated
(``wire.Completion``, ``wire.Delta``) before anything reads it. What fails is a ``MalformedResponseError`` that
names the server and shows what came back, retried like any transient failure.

Time is bounded by ``timeout`` (``MINIONS_REMOTE_TIMEOUT``, default ``DEFAULT_TIMEOUT_S``): no byte for that
long, or a whole (non-streamed) reply that takes longer, is a ``BackendTimeoutError``, and it is not retried:
a server that hung once is likely to hang again, and waiting for it max_retries times more is not an answer.
A request that timed out while others were in flight waited in the server's queue instead: it is sent again,
and fewer go out at once from then on (``InFlight``).

    sync:  chat ────► call(post) ──┐
    async: achat ───► acall(apost) ┼──► after_failure(exc, attempt): wait this long, or raise translated
    stream ─────────► call(open) ──┘
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import math
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import httpx
import openai
from pydantic import ValidationError

from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    ConfigError,
    ContextLengthError,
    MalformedResponseError,
    MinionsError,
    ModelNotFoundError,
    RateLimitError,
)

from .wire import SHOWN_BYTES, Completion, Delta, first_error, glimpse, sse_data

__all__ = [
    "CALL_ERRORS",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "MAX_BACKOFF_S",
    "MAX_RETRY_AFTER_S",
    "PROBE_TIMEOUT_S",
    "TIMEOUT_ENV",
    "InFlight",
    "Server",
    "Transport",
    "backoff_delay",
    "default_timeout",
    "error_detail",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0
"""Seconds a request may take: without a byte, or in all for a reply that is not streamed. Not retried."""
TIMEOUT_ENV = "MINIONS_REMOTE_TIMEOUT"
"""The environment variable that overrides ``DEFAULT_TIMEOUT_S`` (a ``timeout=`` argument overrides both)."""

MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 60.0
"""A server's Retry-After is honoured up to this; a longer wait is the caller's decision, not ours."""

_RETRY_STATUS = frozenset({408, 409, 429})
_CONTEXT_WORDING = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|reduce the length",
    re.IGNORECASE,
)

_STATED_WINDOW = re.compile(r"(?:maximum context length|context (?:length|window)) (?:is|of) (\d+)", re.IGNORECASE)
"""How OpenAI's API and OpenAI-compatible servers (llama-cpp-python's, vLLM's) state the window a prompt overran."""

DEFAULT_CONCURRENCY = 8
"""Requests of a batch in flight at once where the server does not say how many it runs together."""
MAX_REQUEUES = 3
"""Times a request that timed out in a server's queue is sent again (8 in flight, halved 3 times, is 1)."""
PROBE_TIMEOUT_S = 30.0
"""Seconds that request may take: a server that cannot say so in that time is taken not to report them."""

# Raised by the transport while a body is read (the SDK wraps them only while it sends the request).
try:  # openai>=2 sends through httpx2; a legacy httpx.Client passed in still raises httpx errors
    import httpx2

    _TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.TransportError, httpx2.TransportError)
    _CONNECT_ERRORS: tuple[type[Exception], ...] = (httpx.ConnectError, httpx2.ConnectError)
    _TIMEOUTS: tuple[type[Exception], ...] = (openai.APITimeoutError, httpx.TimeoutException, httpx2.TimeoutException)
except ImportError:  # pragma: no cover - depends on the installed SDK
    _TRANSPORT_ERRORS = (httpx.TransportError,)
    _CONNECT_ERRORS = (httpx.ConnectError,)
    _TIMEOUTS = (openai.APITimeoutError, httpx.TimeoutException)
CALL_ERRORS: tuple[type[Exception], ...] = (openai.OpenAIError, *_TRANSPORT_ERRORS)

_Response = openai.APIResponse[Any] | openai.AsyncAPIResponse[Any]


@dataclass(frozen=True, slots=True)
class Shared:
    others: int
    """Requests in flight to the server when this one was sent."""


class InFlight:
    """The requests in flight to one server, and at most how many (none until one timed out in its queue).

    A server that runs one request at a time and does not say so (llama-cpp-python's: no ``/props``) queues the
    others of a batch, and on a busy machine the last of them wait there past the timeout. Such a request, in
    flight beside others when it was sent or when it timed out, is no sign of a hung server: ``queued`` halves
    the limit and the caller sends it again; the requests over the limit wait here, where the wait does not
    count against the timeout. At one in flight, with no queued request given up lately, a timeout is the
    server's own."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.active = 0
        self._last: float | None = None
        self.hung = False
        """A request timed out alone: no more are sent again until one is answered."""
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def slot(self) -> Iterator[Shared]:
        """Hold one of the requests in flight for the block (waiting for one under the limit); yields how many
        others were in flight when it started."""
        with self._cond:
            while self.limit is not None and self.active >= self.limit:
                self._cond.wait()
            shared = Shared(self.active)
            self.active += 1
        try:
            yield shared
        finally:
            with self._cond:
                self.active -= 1
                self._cond.notify_all()

    def queued(self, others: int) -> int:
        """A request in flight beside ``others`` timed out: half as many at most (never under 1)."""
        with self._cond:
            self.limit = max(1, min(self.limit or others + 1, others + 1) // 2)
            self._last = time.monotonic()
            return self.limit

    def requeue(self, others: int, timeout: float, requeued: int) -> bool:
        """Whether a request that timed out beside ``others``, sent again ``requeued`` times so far, waited in the
        queue: others were in flight with it, or requests timed out in the queue lately (the server may still be
        running those: it does not know they were given up, and they hold up the next ones). Not once a request
        timed out alone with none queued lately (the server hangs), until one is answered."""
        with self._cond:
            lately = self._last is not None and time.monotonic() - self._last < MAX_REQUEUES * timeout
            if not (others or lately):
                self.hung = True
            return bool(others or lately) and not self.hung and requeued < MAX_REQUEUES


def default_timeout() -> float:
    """``MINIONS_REMOTE_TIMEOUT`` in seconds, else ``DEFAULT_TIMEOUT_S``."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ConfigError(f"{TIMEOUT_ENV}={value!r} is not a number of seconds: set it to one, e.g. 60.")
    return seconds


def _malformed(response: _Response, body: bytes, why: str) -> openai.APIResponseValidationError:
    """The SDK's error for a reply that is not what the API defines; its message shows what came back."""
    message = f"{why}; {glimpse(response.headers.get('content-type'), body)}"
    head = body[:SHOWN_BYTES].decode("utf-8", "replace")
    return openai.APIResponseValidationError(response.http_response, head, message=message)


def _parse_reply(response: _Response, body: bytes) -> Completion:
    try:
        return Completion.model_validate_json(body)
    except ValidationError as exc:
        raise _malformed(response, body, first_error(exc)) from exc


def _check_deadline(response: _Response, deadline: float) -> None:
    """A server that trickles its reply gets ``timeout`` seconds for all of it, not per byte."""
    if time.monotonic() > deadline:
        raise openai.APITimeoutError(request=response.http_response.request)


def backoff_delay(attempt: int, base_s: float, retry_after: float | None = None) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    The server's Retry-After wins when it gave one (capped at ``MAX_RETRY_AFTER_S``); otherwise the wait
    doubles each attempt from ``base_s`` up to ``MAX_BACKOFF_S``, and a random factor in [0.5, 1] spreads
    out clients that failed together.
    """
    if retry_after is not None and retry_after >= 0:
        return min(retry_after, MAX_RETRY_AFTER_S)
    return min(base_s * 2 ** (attempt - 1), MAX_BACKOFF_S) * random.uniform(0.5, 1.0)


def _retry_after(exc: Exception) -> float | None:
    """The server's Retry-After (or retry-after-ms) header in seconds, if it sent one we can read."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _is_transient(exc: Exception) -> bool:
    """Worth another try: rate limits, refused or dropped connections, server-side (5xx) errors and malformed
    replies (a proxy's error page passes). Not a timeout: see the module docstring."""
    if isinstance(exc, _TIMEOUTS):
        return False
    if isinstance(exc, (openai.APIConnectionError, openai.APIResponseValidationError, *_TRANSPORT_ERRORS)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRY_STATUS or exc.status_code >= 500
    return False


def error_detail(exc: openai.APIStatusError) -> str:
    """The server's own error message, on one line."""
    body = exc.body
    message: Any = exc.message
    if isinstance(body, str) and body:
        message = body
    elif isinstance(body, Mapping):
        message = body.get("message") or body.get("error") or body
        if isinstance(message, Mapping):
            message = message.get("message", message)
    return " ".join(str(message).split())


@dataclass(frozen=True, slots=True)
class Server:
    """Who a transport talks to, as its errors and logs name it."""

    name: str
    """The backend's name (``openai/gpt-4o-mini``)."""
    model: str
    address: str
    """The base URL requests go to."""
    provider: str
    key_env: str | None
    """The variable that holds the provider's key (what a rejected key says to check); None: it needs none."""


class Transport:
    """Requests to one OpenAI-compatible server: the SDK's clients (``http_client``, an ``httpx.Client``: a proxy,
    a test transport, carries the synchronous calls), ``max_retries`` retries ``backoff_s`` apart and doubling, the
    requests in flight (``InFlight``) and the server's slots (``ask_slots``: asked at ``/props`` on first use).
    ``again``: whether a failed request is to be sent again at once, changed (the backend's schema fallback)."""

    def __init__(
        self,
        server: Server,
        key: Callable[[], str],
        *,
        timeout: float,
        max_retries: int,
        backoff_s: float,
        ask_slots: bool,
        http_client: httpx.Client | None = None,
        again: Callable[[Exception], bool] = lambda exc: False,
    ) -> None:
        self.server, self._key, self.timeout, self._again = server, key, timeout, again
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.in_flight = InFlight()
        self._slots: int | None = None
        self._slots_known = not ask_slots  # asked at the first batch (see max_concurrency)
        self._http_client = http_client
        self._lock = threading.Lock()
        self._asking = threading.Lock()  # held while the server is asked its slots
        self._client: openai.OpenAI | None = None
        # An async client's connections belong to the event loop that opened them: one client per loop.
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    # -- clients -----------------------------------------------------------------------------------

    def _sync_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = openai.OpenAI(
                    api_key=self._key(),
                    base_url=self.server.address,
                    max_retries=0,  # we retry ourselves, see after_failure
                    timeout=self.timeout,
                    http_client=cast(Any, self._http_client),
                )
            return self._client

    def _async_client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._aclients.get(loop)
            if client is None:
                client = openai.AsyncOpenAI(
                    api_key=self._key(), base_url=self.server.address, max_retries=0, timeout=self.timeout
                )
                self._aclients[loop] = client
            return client

    # -- the requests in flight ---------------------------------------------------------------------

    @property
    def max_concurrency(self) -> int:
        """Requests of a batch in flight at once: the server's ``slots`` where it says, else
        ``DEFAULT_CONCURRENCY``, and fewer once requests queued on it timed out (``InFlight``). More than it runs
        together would wait in its queue, and the wait counts against the timeout."""
        return min(self.slots or DEFAULT_CONCURRENCY, self.in_flight.limit or DEFAULT_CONCURRENCY)

    @max_concurrency.setter
    def max_concurrency(self, requests: int) -> None:
        self._slots, self._slots_known = requests, True

    @property
    def slots(self) -> int | None:
        """The requests the server runs together, where it says so (llama.cpp's server reports its slots at
        ``/props``), asked once, the first time it is read (a batch reads it); None elsewhere."""
        if not self._slots_known:
            with self._asking:
                if not self._slots_known:
                    self._slots, self._slots_known = self.server_slots(), True
        return self._slots

    def server_slots(self) -> int | None:
        """The slots the server reports (``total_slots`` at ``/props`` beside ``/v1``), or None: servers other than
        llama.cpp's answer 404 there."""
        url = f"{self.server.address.rstrip('/').removesuffix('/v1')}/props"
        try:
            with contextlib.ExitStack() as stack:
                client = self._http_client or stack.enter_context(httpx.Client())
                response = client.get(url, timeout=min(self.timeout, PROBE_TIMEOUT_S))
            slots = response.json().get("total_slots") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.info("%s: no slots reported (%s: %s)", url, type(exc).__name__, exc)
            return None
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            return None
        log.info("%s runs %d requests at once", self.server.address, slots)
        return slots

    # -- retries and error translation (shared by every call) ---------------------------------------

    def after_failure(self, exc: Exception, attempt: int) -> float:
        """After failed attempt ``attempt``: the seconds to wait before the next, or raise our error."""
        if self._again(exc):
            return 0.0
        if attempt <= self.max_retries and _is_transient(exc):
            delay = backoff_delay(attempt, self.backoff_s, _retry_after(exc))
            log.info(
                "%s: %s; retry %d of %d in %.2fs",
                self.server.name,
                type(exc).__name__,
                attempt,
                self.max_retries,
                delay,
            )
            return delay
        raise self.translate(exc, attempt) from exc

    def call(self, request: Callable[[], T]) -> tuple[T, int]:
        """Run ``request`` with retries; return its value and the number of attempts it took. A request that
        timed out beside others in flight waited in the server's queue behind them: it is sent again (up to
        ``MAX_REQUEUES`` times), with at most half as many in flight from then on (``InFlight``)."""
        attempt = requeued = 0
        while True:
            attempt += 1
            with self.in_flight.slot() as shared:
                try:
                    value = request()
                except CALL_ERRORS as exc:
                    error, others = exc, max(shared.others, self.in_flight.active - 1)
                else:
                    self.in_flight.hung = False
                    return value, attempt
            if isinstance(error, _TIMEOUTS) and self.in_flight.requeue(others, self.timeout, requeued):
                requeued += 1
                limit = self.in_flight.queued(others)
                log.info("%s: a request sent beside %d others timed out; at most %d at once now, sending it "
                         "again", self.server.address, others, limit)  # fmt: skip
                continue
            time.sleep(self.after_failure(error, attempt))

    async def acall(self, request: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await request(), attempt
            except CALL_ERRORS as exc:
                await asyncio.sleep(self.after_failure(exc, attempt))

    def translate(self, exc: Exception, attempts: int) -> MinionsError:
        """Our error for an SDK (or transport) error; the message names the server and says what to do."""
        ctx: dict[str, Any] = {"backend": self.server.name, "attempts": attempts}
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        where = f"{self.server.name} at {self.server.address}"
        if isinstance(exc, _TIMEOUTS):
            return BackendTimeoutError(
                f"{where} did not answer within {self.timeout:g}s{tries}: retry later, or raise the timeout "
                f"({TIMEOUT_ENV} or the backend's timeout=).",
                **ctx,
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return MalformedResponseError(
                f"{where} answered HTTP {exc.status_code} but not with a valid chat completion{tries}: "
                f"{exc.message}. Check the base URL (is a proxy or a web page answering?), or retry later.",
                content_type=exc.response.headers.get("content-type"),
                raw=exc.body,
                **ctx,
            )
        if isinstance(exc, (openai.APIConnectionError, *_TRANSPORT_ERRORS)):
            cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) else exc
            if cause is None or isinstance(cause, _CONNECT_ERRORS):
                return BackendConnectionError(
                    f"Cannot reach {self.server.address}{tries}: is the server running? Check the URL or start it.",
                    **ctx,
                )
            return BackendConnectionError(
                f"{where} dropped the connection before its reply was complete{tries} "
                f"({type(cause).__name__}: {' '.join(str(cause).split())}): retry later.",
                **ctx,
            )
        if isinstance(exc, openai.RateLimitError):
            return RateLimitError(
                f"{where} is still rate limited{tries}: {error_detail(exc)}. "
                "Wait, lower the concurrency or raise max_retries.",
                raw=exc.body,
                **ctx,
            )
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            where = f"the variable {self.server.key_env}" if self.server.key_env else "the api_key given"
            return ConfigError(
                f"{self.server.address} rejected the API key for {self.server.provider!r} "
                f"(HTTP {exc.status_code}: {error_detail(exc)}): check {where}."
            )
        if isinstance(exc, openai.NotFoundError):
            return ModelNotFoundError(
                f"{self.server.address} has no model {self.server.model!r} (HTTP 404: {error_detail(exc)}): "
                "check the model name, and the base URL."
            )
        if isinstance(exc, openai.APIStatusError):
            detail = error_detail(exc)
            if exc.code == "context_length_exceeded" or (exc.status_code == 400 and _CONTEXT_WORDING.search(detail)):
                stated = _STATED_WINDOW.search(detail)
                return ContextLengthError(
                    f"The prompt does not fit {self.server.name}'s context window ({detail}): "
                    "send less text, or smaller chunks.",
                    window=int(stated[1]) if stated else None,
                    raw=exc.body,
                    **ctx,
                )
            return BackendError(f"{where} answered HTTP {exc.status_code}{tries}: {detail}", raw=exc.body, **ctx)
        return BackendError(f"{where} failed{tries}: {type(exc).__name__}: {exc}", **ctx)

    # -- one attempt: send, read within the timeout, validate -------------------------------------------

    def post(self, request: dict[str, Any], timeout: float | None = None) -> Completion:
        seconds = timeout or self.timeout
        deadline = time.monotonic() + seconds
        create = self._sync_client().chat.completions.with_streaming_response.create
        with create(**request, timeout=seconds) as response:
            body = bytearray()
            for part in response.iter_bytes():
                body += part
                _check_deadline(response, deadline)
        return _parse_reply(response, bytes(body))

    async def apost(self, request: dict[str, Any]) -> Completion:
        deadline = time.monotonic() + self.timeout
        async with self._async_client().chat.completions.with_streaming_response.create(**request) as response:
            body = bytearray()
            async for part in response.iter_bytes():
                body += part
                _check_deadline(response, deadline)
        return _parse_reply(response, bytes(body))

    def open(self, request: dict[str, Any]) -> tuple[contextlib.ExitStack, openai.APIResponse[Any]]:
        """Open a streamed request: the response, and the stack that closes it. A reply that is not an event
        stream is malformed (and closed here)."""
        with contextlib.ExitStack() as stack:
            create = self._sync_client().chat.completions.with_streaming_response.create
            response = stack.enter_context(create(**request, stream=True))
            if "event-stream" not in response.headers.get("content-type", ""):
                head = bytearray()
                for part in response.iter_bytes():
                    head += part
                    if len(head) > SHOWN_BYTES:
                        break
                raise _malformed(response, bytes(head), "not an event stream")
            return stack.pop_all(), response

    def deltas(self, response: openai.APIResponse[Any]) -> Iterator[str]:
        """The text of each event of an open stream. A stream that ends before ``[DONE]`` or a finish reason
        was cut off: that is an error, not a shorter reply."""
        finished, data = False, ""
        for data in sse_data(response.iter_lines()):
            if data == "[DONE]":
                return
            try:
                chunk = Delta.model_validate_json(data)
            except ValidationError as exc:
                raise _malformed(response, data.encode(), first_error(exc)) from exc
            if chunk.error is not None:
                detail = " ".join(str(chunk.error).split())
                raise BackendError(
                    f"{self.server.name} at {self.server.address} sent an error instead of the rest of its reply: "
                    f"{detail}",
                    backend=self.server.name,
                    raw=chunk.error,
                )
            for choice in chunk.choices[:1]:
                finished = finished or choice.finish_reason is not None
                if choice.delta.content:
                    yield choice.delta.content
        if not finished:
            raise _malformed(response, data.encode(), "the stream ended before the reply did (no [DONE])")
