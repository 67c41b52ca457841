"""Any OpenAI-compatible chat endpoint, through the official ``openai`` SDK.

Providers are configuration, not classes: a ``Provider`` is a base URL and the environment variable that
holds its key. One SDK client is built per backend (lazily, with the key read at the first call) and the
SDK's own retries are off: we retry rate limits and transient failures here, with exponential backoff and
jitter, and translate the SDK's errors into the minions tree at this boundary.

The SDK hands us the raw response and we read it ourselves: a server (or a proxy in front of it) may answer
HTTP 200 with an HTML page, JSON cut off mid-way or a completion without choices, and the reply is validated
(``wire.Completion``, ``wire.Delta``) before anything reads it. What fails is a ``MalformedResponseError`` that
names the server and shows what came back, retried like any transient failure.

Time is bounded by ``timeout`` (``MINIONS_REMOTE_TIMEOUT``, default ``DEFAULT_TIMEOUT_S``): no byte for that
long, or a whole (non-streamed) reply that takes longer, is a ``BackendTimeoutError``, and it is not retried:
a server that hung once is likely to hang again, and waiting for it max_retries times more is not an answer.
A request that timed out while others were in flight waited in the server's queue instead: it is sent again,
and fewer go out at once from then on (``InFlight``).

    sync:  chat/_chat ──► _call(_post) ──┐
    async: achat ──────► _acall(_apost) ─┼──► _after_failure(exc, attempt): wait this long, or raise translated
    stream ────────────► _call(_open) ───┘
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
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

import httpx
import openai
from pydantic import ValidationError

from minions.cost import Price, PriceTable, default_price_table
from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    ConfigError,
    ContextLengthError,
    MalformedResponseError,
    MinionsError,
    MissingAPIKeyError,
    ModelNotFoundError,
    RateLimitError,
    UnknownProviderError,
)
from minions.tokens import count_tokens
from minions.types import ChatResult, Message, SamplingParams, Timings, Usage, as_messages

from .address import on_this_device
from .base import PROBE, AskingBackend, Capabilities, MessagesLike
from .wire import SHOWN_BYTES, Completion, Delta, first_error, glimpse, logprob_steps, sse_data

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "PROVIDERS",
    "TIMEOUT_ENV",
    "OpenAIBackend",
    "Provider",
    "backoff_delay",
    "default_timeout",
    "key_for",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

JsonSchemaStyle = Literal["json_schema", "json_object"]


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str | None
    """None: the SDK's default (api.openai.com, or ``OPENAI_BASE_URL``)."""
    key_env: str | None
    """The variable that holds the key; None when the server needs none (a local server)."""
    json_schema_style: JsonSchemaStyle = "json_schema"
    """How the server takes a JSON schema: OpenAI's ``{"type": "json_schema", ...}``, or the older
    ``{"type": "json_object", "schema": ...}`` that llama-cpp-python's server (among others) expects."""


PROVIDERS: Mapping[str, Provider] = MappingProxyType(
    {
        p.name: p
        for p in [
            Provider("openai", None, "OPENAI_API_KEY"),
            Provider("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
            Provider("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
            Provider("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
            Provider("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
            Provider("anthropic", "https://api.anthropic.com/v1/", "ANTHROPIC_API_KEY"),
            Provider("gemini", "https://generativelanguage.googleapis.com/v1beta/openai/", "GEMINI_API_KEY"),
            Provider("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        ]
    }
)

OPENAI_URL = "https://api.openai.com/v1"
"""The SDK's default base URL."""

PLACEHOLDER_KEY = "not-needed"
"""Sent to a custom server that needs no key: the SDK insists on one, local servers accept anything."""


def key_for(address: str, given: str | None = None, *, provider: Provider | None = None) -> str | None:
    """The key to send to ``address``: ``given`` (the key named for this address) if any; else the key variable
    of the provider whose own address it is (``OPENAI_API_KEY`` to api.openai.com, or to ``OPENAI_BASE_URL`` where
    the user pointed OpenAI's SDK; ``GROQ_API_KEY`` to api.groq.com; ``provider``'s to its base URL); else None.
    A key variable goes only to the provider it belongs to: a custom address (a colleague's server, a rented GPU, a
    typo) is never sent one, whichever backend talks to it."""
    if given:
        return given
    for owner in (*PROVIDERS.values(), *([provider] if provider else [])):
        homes = [owner.base_url] if owner.base_url else [OPENAI_URL, os.environ.get("OPENAI_BASE_URL")]
        if owner.key_env and any(home and _same_origin(home, address) for home in homes):
            return os.environ.get(owner.key_env) or None
    return None


def _same_origin(a: str, b: str) -> bool:
    """Whether two URLs name the same server: scheme, host and port (the path may differ: ``/v1``, ``/v1/``)."""
    try:
        x, y = httpx.URL(a.strip()), httpx.URL(b.strip())
    except (httpx.InvalidURL, TypeError):
        return False
    return (x.scheme, x.host.rstrip("."), x.port) == (y.scheme, y.host.rstrip("."), y.port) and bool(x.host)


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

# Prefix -> context window in tokens; the longest matching prefix wins.
_CONTEXT_WINDOWS: Mapping[str, int] = {"gpt-4o": 128_000, "gpt-4.1": 1_047_576, "gpt-5": 400_000}
DEFAULT_CONTEXT_WINDOW = 128_000

# OpenAI's reasoning models take max_completion_tokens and only their default temperature.
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")

MAX_TOP_LOGPROBS = 20
"""The most alternatives per token OpenAI's API reports (``top_logprobs``); servers that copy it cap it too."""
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
_CALL_ERRORS: tuple[type[Exception], ...] = (openai.OpenAIError, *_TRANSPORT_ERRORS)

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


def _detail(exc: openai.APIStatusError) -> str:
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


def context_window_for(model: str) -> int:
    name = model.split("/")[-1].lower()
    matches = [prefix for prefix in _CONTEXT_WINDOWS if name.startswith(prefix)]
    return _CONTEXT_WINDOWS[max(matches, key=len)] if matches else DEFAULT_CONTEXT_WINDOW


class OpenAIBackend(AskingBackend):
    """A chat model behind an OpenAI-compatible API: OpenAI itself, a hosted provider, or a local server.

    ``http_client`` (an ``httpx.Client``: a proxy, a test transport) carries the synchronous calls
    (``chat``, ``batch``, ``stream``); ``achat`` uses the SDK's own async client. ``timeout`` is in seconds
    (see ``DEFAULT_TIMEOUT_S``); None reads ``MINIONS_REMOTE_TIMEOUT``.
    """

    def __init__(
        self,
        model: str,
        *,
        provider: Provider | str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        prices: PriceTable | None = None,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        timeout: float | None = None,
        context_window: int | None = None,
        json_schema_style: JsonSchemaStyle | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        if isinstance(provider, str):
            if provider not in PROVIDERS:
                raise UnknownProviderError(
                    f"Unknown provider {provider!r}: use one of {', '.join(sorted(PROVIDERS))}, "
                    "or pass base_url= for any other OpenAI-compatible server."
                )
            provider = PROVIDERS[provider]
        self.model = model
        self.provider = provider
        self.name = f"{provider.name}/{model}"
        self.base_url = base_url or provider.base_url
        # Where requests go, as the SDK would pick it (OPENAI_BASE_URL, then OpenAI's), read once: the clients
        # are built with it, so whether it is on this device is decided on the address really used.
        self.address: str = self.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        if timeout is not None and not 0 < timeout < math.inf:
            raise ConfigError(f"timeout={timeout!r}: give a positive number of seconds.")
        self.timeout = timeout if timeout is not None else default_timeout()
        self.json_schema_style: JsonSchemaStyle = json_schema_style or provider.json_schema_style
        self._api_key = api_key
        self._custom_url = base_url is not None or self.provider.name not in PROVIDERS
        # ``logprobs``: OpenAI's own API reports them for its chat models (not its reasoning models), and other
        # hosted APIs are taken not to (they are not asked: every call is billed); a server at a custom URL is asked
        # once (llama-cpp-python's, vLLM's and llama.cpp's servers report them, some proxies do not).
        # ``batching``: a batch's requests go out together (``max_concurrency``); a hosted API runs them together,
        # a server at a custom URL where it says it has more than one slot (llama-cpp-python's runs one request at
        # a time and says nothing, so its jobs run one after another: ``_asked``).
        capabilities = Capabilities(
            json_schema=True,
            logprobs=self._hosted_logprobs(),
            batching=not self._custom_url,
            streaming=True,
            local=on_this_device(self.address),
            context_window=context_window or context_window_for(model),
        )
        self._declare(capabilities, ask=self._custom_url)
        self._slots: int | None = None
        self._slots_known = not self._custom_url  # asked at the first batch (see max_concurrency)
        self._in_flight = InFlight()
        self._prices = prices
        self._http_client = http_client
        self._lock = threading.Lock()
        self._client: openai.OpenAI | None = None
        # An async client's connections belong to the event loop that opened them: one client per loop.
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    # -- clients -----------------------------------------------------------------------------------

    def _key(self) -> str:
        """The API key, read from the environment now rather than at construction: the one given, else the key
        variable of the provider whose address this is (``key_for``); a custom address without one gets a
        placeholder, never another provider's key."""
        key = key_for(self.address, self._api_key, provider=self.provider)
        if key:
            return key
        env = self.provider.key_env
        if env is None or self._custom_url:
            return PLACEHOLDER_KEY
        raise MissingAPIKeyError(self.provider.name, env)

    def _sync_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = openai.OpenAI(
                    api_key=self._key(),
                    base_url=self.address,
                    max_retries=0,  # we retry ourselves, see _after_failure
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
                    api_key=self._key(), base_url=self.address, max_retries=0, timeout=self.timeout
                )
                self._aclients[loop] = client
            return client

    @property
    def endpoint(self) -> str:
        """The base URL requests go to, for messages."""
        return self.address

    @property
    def price(self) -> Price | None:
        """What its calls cost per million tokens (each reply's ``usage.cost_usd`` is priced at it); None: unknown."""
        return (self._prices or default_price_table()).lookup(self.model)

    # -- capabilities ------------------------------------------------------------------------------

    @property
    def max_concurrency(self) -> int:
        """Requests of a batch in flight at once: the server's ``slots`` where it says, else
        ``DEFAULT_CONCURRENCY``, and fewer once requests queued on it timed out (``InFlight``). More than it runs
        together would wait in its queue, and the wait counts against the timeout."""
        return min(self.slots or DEFAULT_CONCURRENCY, self._in_flight.limit or DEFAULT_CONCURRENCY)

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
                    self._slots, self._slots_known = self._server_slots(), True
        return self._slots

    def _server_slots(self) -> int | None:
        """The slots the server reports (``total_slots`` at ``/props`` beside ``/v1``), or None: servers other than
        llama.cpp's answer 404 there."""
        url = f"{self.address.rstrip('/').removesuffix('/v1')}/props"
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
        log.info("%s runs %d requests at once", self.endpoint, slots)
        return slots

    def _asked(self, declared: Capabilities) -> Capabilities:
        """What the server says: whether it reports log-probabilities, and whether it runs requests together (its
        slots, asked here too: ``slots`` would wait on the lock the caller holds)."""
        if not self._slots_known:
            self._slots, self._slots_known = self._server_slots(), True
        return replace(declared, logprobs=self._reports_logprobs(), batching=(self._slots or 1) > 1)

    def _hosted_logprobs(self) -> bool:
        reasoning = self.model.lower().startswith(_REASONING_PREFIXES)
        return not self._custom_url and self.provider.name == "openai" and not reasoning

    def _reports_logprobs(self) -> bool:
        """Whether the server answers a request for log-probabilities with them: one attempt, one token. A server
        that refuses the request, or that cannot be reached, counts as one that does not report them: its jobs
        take the schema path, which asks nothing of it that it may not do."""
        request = self._request(list(PROBE.messages), PROBE.params)
        try:
            choice = self._post(request, timeout=min(self.timeout, PROBE_TIMEOUT_S)).choices[0]
        except _CALL_ERRORS as exc:
            log.info("%s: no log-probabilities (%s: %s)", self.endpoint, type(exc).__name__, exc)
            return False
        reports = bool(choice.logprobs and choice.logprobs.content)
        log.info("%s %s log-probabilities", self.endpoint, "reports" if reports else "does not report")
        return reports

    # -- retries and error translation (shared by every call) ---------------------------------------

    def _after_failure(self, exc: Exception, attempt: int) -> float:
        """After failed attempt ``attempt``: the seconds to wait before the next, or raise our error."""
        if self._falls_back_to_json_object(exc):
            return 0.0
        if attempt <= self.max_retries and _is_transient(exc):
            delay = backoff_delay(attempt, self.backoff_s, _retry_after(exc))
            log.info(
                "%s: %s; retry %d of %d in %.2fs",
                self.name,
                type(exc).__name__,
                attempt,
                self.max_retries,
                delay,
            )
            return delay
        raise self._translate(exc, attempt) from exc

    def _falls_back_to_json_object(self, exc: Exception) -> bool:
        """Servers other than OpenAI's may reject ``{"type": "json_schema"}`` (llama-cpp-python's server answers
        422) but take the older ``{"type": "json_object", "schema": ...}``: switch once, for a custom URL only."""
        if not (self._custom_url and self.json_schema_style == "json_schema"):
            return False
        if not (isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422, 500)):
            return False
        if "json_schema" not in _detail(exc) and "response_format" not in _detail(exc):
            return False
        log.info("%s rejected response_format json_schema; using json_object with a schema", self.endpoint)
        self.json_schema_style = "json_object"
        return True

    def _call(self, request: Callable[[], T]) -> tuple[T, int]:
        """Run ``request`` with retries; return its value and the number of attempts it took. A request that
        timed out beside others in flight waited in the server's queue behind them: it is sent again (up to
        ``MAX_REQUEUES`` times), with at most half as many in flight from then on (``InFlight``)."""
        attempt = requeued = 0
        while True:
            attempt += 1
            with self._in_flight.slot() as shared:
                try:
                    value = request()
                except _CALL_ERRORS as exc:
                    error, others = exc, max(shared.others, self._in_flight.active - 1)
                else:
                    self._in_flight.hung = False
                    return value, attempt
            if isinstance(error, _TIMEOUTS) and self._in_flight.requeue(others, self.timeout, requeued):
                requeued += 1
                limit = self._in_flight.queued(others)
                log.info("%s: a request sent beside %d others timed out; at most %d at once now, sending it "
                         "again", self.endpoint, others, limit)  # fmt: skip
                continue
            time.sleep(self._after_failure(error, attempt))

    async def _acall(self, request: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await request(), attempt
            except _CALL_ERRORS as exc:
                await asyncio.sleep(self._after_failure(exc, attempt))

    def _translate(self, exc: Exception, attempts: int) -> MinionsError:
        """Our error for an SDK (or transport) error; the message names the server and says what to do."""
        ctx: dict[str, Any] = {"backend": self.name, "attempts": attempts}
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        where = f"{self.name} at {self.endpoint}"
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
                    f"Cannot reach {self.endpoint}{tries}: is the server running? Check the URL or start it.",
                    **ctx,
                )
            return BackendConnectionError(
                f"{where} dropped the connection before its reply was complete{tries} "
                f"({type(cause).__name__}: {' '.join(str(cause).split())}): retry later.",
                **ctx,
            )
        if isinstance(exc, openai.RateLimitError):
            return RateLimitError(
                f"{where} is still rate limited{tries}: {_detail(exc)}. "
                "Wait, lower the concurrency or raise max_retries.",
                raw=exc.body,
                **ctx,
            )
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            where = f"the variable {self.provider.key_env}" if self.provider.key_env else "the api_key given"
            return ConfigError(
                f"{self.endpoint} rejected the API key for {self.provider.name!r} "
                f"(HTTP {exc.status_code}: {_detail(exc)}): check {where}."
            )
        if isinstance(exc, openai.NotFoundError):
            return ModelNotFoundError(
                f"{self.endpoint} has no model {self.model!r} (HTTP 404: {_detail(exc)}): "
                "check the model name, and the base URL."
            )
        if isinstance(exc, openai.APIStatusError):
            detail = _detail(exc)
            if exc.code == "context_length_exceeded" or (exc.status_code == 400 and _CONTEXT_WORDING.search(detail)):
                stated = _STATED_WINDOW.search(detail)
                return ContextLengthError(
                    f"The prompt does not fit {self.name}'s context window ({detail}): "
                    "send less text, or smaller chunks.",
                    window=int(stated[1]) if stated else None,
                    raw=exc.body,
                    **ctx,
                )
            return BackendError(f"{where} answered HTTP {exc.status_code}{tries}: {detail}", raw=exc.body, **ctx)
        return BackendError(f"{where} failed{tries}: {type(exc).__name__}: {exc}", **ctx)

    # -- requests and results ----------------------------------------------------------------------

    def _request(self, messages: list[Message], params: SamplingParams) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one call."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": [m.to_dict() for m in messages]}
        reasoning = self.provider.name == "openai" and self.model.lower().startswith(_REASONING_PREFIXES)
        if reasoning:
            kwargs["max_completion_tokens"] = params.max_tokens
        else:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens)
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if params.logprobs > 0:
            kwargs.update(logprobs=True, top_logprobs=min(params.logprobs, MAX_TOP_LOGPROBS))
        if params.json_schema is not None:
            schema = dict(params.json_schema)
            if self.json_schema_style == "json_object":
                kwargs["response_format"] = {"type": "json_object", "schema": schema}
            else:
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "reply", "schema": schema, "strict": True},
                }
        return kwargs

    def _result(self, reply: Completion, messages: list[Message], seconds: float, attempts: int) -> ChatResult:
        choice = reply.choices[0]
        text = choice.message.content or ""
        stats: dict[str, Any] = {"attempts": attempts}
        u = reply.usage
        if u is not None:
            details = u.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
            prompt, completion_tokens = u.prompt_tokens or 0, u.completion_tokens or 0
        else:
            prompt = sum(count_tokens(m.content, self.model) for m in messages)
            completion_tokens, cached = count_tokens(text, self.model), 0
            stats["usage_estimated"] = True
        if choice.logprobs is not None and choice.logprobs.content:
            stats["logprobs"] = logprob_steps(choice.logprobs.content)
        usage = Usage(prompt, completion_tokens, cached, calls=1, seconds=seconds)
        usage = replace(usage, cost_usd=self.price.cost(usage) if self.price else 0.0)
        return ChatResult(
            text=text,
            usage=usage,
            finish_reason="length" if choice.finish_reason == "length" else "stop",
            timings=Timings(total_s=seconds),
            model=self.name,
            stats=stats,
        )

    # -- one attempt: send, read within the timeout, validate -------------------------------------------

    def _post(self, request: dict[str, Any], timeout: float | None = None) -> Completion:
        seconds = timeout or self.timeout
        deadline = time.monotonic() + seconds
        create = self._sync_client().chat.completions.with_streaming_response.create
        with create(**request, timeout=seconds) as response:
            body = bytearray()
            for part in response.iter_bytes():
                body += part
                _check_deadline(response, deadline)
        return _parse_reply(response, bytes(body))

    async def _apost(self, request: dict[str, Any]) -> Completion:
        deadline = time.monotonic() + self.timeout
        async with self._async_client().chat.completions.with_streaming_response.create(**request) as response:
            body = bytearray()
            async for part in response.iter_bytes():
                body += part
                _check_deadline(response, deadline)
        return _parse_reply(response, bytes(body))

    def _open(self, request: dict[str, Any]) -> tuple[contextlib.ExitStack, openai.APIResponse[Any]]:
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

    def _deltas(self, response: openai.APIResponse[Any]) -> Iterator[str]:
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
                    f"{self.name} at {self.endpoint} sent an error instead of the rest of its reply: {detail}",
                    backend=self.name,
                    raw=chunk.error,
                )
            for choice in chunk.choices[:1]:
                finished = finished or choice.finish_reason is not None
                if choice.delta.content:
                    yield choice.delta.content
        if not finished:
            raise _malformed(response, data.encode(), "the stream ended before the reply did (no [DONE])")

    # -- the three calls ---------------------------------------------------------------------------

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        start = time.perf_counter()
        reply, attempts = self._call(lambda: self._post(self._request(messages, params)))
        return self._result(reply, messages, time.perf_counter() - start, attempts)

    async def achat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult:
        msgs, p = as_messages(messages), params or SamplingParams()
        start = time.perf_counter()
        reply, attempts = await self._acall(lambda: self._apost(self._request(msgs, p)))
        return self._result(reply, msgs, time.perf_counter() - start, attempts)

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]:
        """Yield the reply's text as it arrives. Opening the stream is retried; a broken stream is not."""
        msgs, p = as_messages(messages), params or SamplingParams()
        (closing, response), attempts = self._call(lambda: self._open(self._request(msgs, p)))
        with closing:
            try:
                yield from self._deltas(response)
            except _CALL_ERRORS as exc:
                raise self._translate(exc, attempts) from exc

    def count_tokens(self, text: str) -> int:
        return count_tokens(text, self.model)
