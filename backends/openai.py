"""Any OpenAI-compatible chat endpoint, through the official ``openai`` SDK: the chat semantics.

Providers are configuration, not classes: a ``Provider`` is a base URL and the environment variable that
holds its key. ``OpenAIBackend`` says what a chat request is (its sampling parameters, a JSON schema in the form
the server takes, log-probabilities), what the model can do (its declared capabilities, a custom server asked
once) and what a reply means (text, usage, cost). How a request reaches the server (the SDK's clients, time,
retries, requests in flight, errors translated) is ``backends.openai_transport``.

    chat ──► _request ──► transport.call(post) ──► _result
    achat ─► _request ──► transport.acall(apost) ─► _result
    stream ► _request ──► transport.call(open) ──► transport.deltas
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal

import httpx
import openai

from minions.cost import Price, PriceTable, default_price_table
from minions.errors import ConfigError, MissingAPIKeyError, UnknownProviderError
from minions.tokens import count_tokens
from minions.types import ChatResult, Message, SamplingParams, Timings, Usage, as_messages

from .address import on_this_device
from .base import PROBE, AskingBackend, Capabilities, MessagesLike
from .openai_transport import (
    CALL_ERRORS,
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_S,
    MAX_BACKOFF_S,
    MAX_RETRY_AFTER_S,
    PROBE_TIMEOUT_S,
    TIMEOUT_ENV,
    Server,
    Transport,
    backoff_delay,
    default_timeout,
    error_detail,
)
from .wire import Completion, logprob_steps

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "MAX_BACKOFF_S",
    "MAX_RETRY_AFTER_S",
    "PROVIDERS",
    "TIMEOUT_ENV",
    "OpenAIBackend",
    "Provider",
    "backoff_delay",
    "default_timeout",
    "key_for",
]

log = logging.getLogger(__name__)

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


# Prefix -> context window in tokens; the longest matching prefix wins.
_CONTEXT_WINDOWS: Mapping[str, int] = {"gpt-4o": 128_000, "gpt-4.1": 1_047_576, "gpt-5": 400_000}
DEFAULT_CONTEXT_WINDOW = 128_000

# OpenAI's reasoning models take max_completion_tokens and only their default temperature.
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")

MAX_TOP_LOGPROBS = 20
"""The most alternatives per token OpenAI's API reports (``top_logprobs``); servers that copy it cap it too."""


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
        if timeout is not None and not 0 < timeout < math.inf:
            raise ConfigError(f"timeout={timeout!r}: give a positive number of seconds.")
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
        self._prices = prices
        server = Server(self.name, model, self.address, provider.name, provider.key_env)
        self._transport = Transport(
            server, self._key, timeout=timeout if timeout is not None else default_timeout(), max_retries=max_retries,
            backoff_s=backoff_s, ask_slots=self._custom_url, http_client=http_client,
            again=self._falls_back_to_json_object,
        )  # fmt: skip

    # -- the key, the address, the price -------------------------------------------------------------

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

    @property
    def endpoint(self) -> str:
        """The base URL requests go to, for messages."""
        return self.address

    @property
    def price(self) -> Price | None:
        """What its calls cost per million tokens (each reply's ``usage.cost_usd`` is priced at it); None: unknown."""
        return (self._prices or default_price_table()).lookup(self.model)

    # -- the transport's settings and the server's slots (``openai_transport.Transport``) ----------------

    @property
    def timeout(self) -> float:
        """Seconds a request may take (``DEFAULT_TIMEOUT_S``, ``MINIONS_REMOTE_TIMEOUT`` or ``timeout=``)."""
        return self._transport.timeout

    @property
    def max_retries(self) -> int:
        return self._transport.max_retries

    @property
    def backoff_s(self) -> float:
        return self._transport.backoff_s

    @property
    def max_concurrency(self) -> int:
        """Requests of a batch in flight at once (``Transport.max_concurrency``)."""
        return self._transport.max_concurrency

    @max_concurrency.setter
    def max_concurrency(self, requests: int) -> None:
        self._transport.max_concurrency = requests

    @property
    def slots(self) -> int | None:
        """The requests the server runs together, where it says so (``Transport.slots``); None elsewhere."""
        return self._transport.slots

    # -- capabilities ------------------------------------------------------------------------------

    def _asked(self, declared: Capabilities) -> Capabilities:
        """What the server says: whether it reports log-probabilities, and whether it runs requests together (its
        slots, asked first)."""
        slots = self.slots
        return replace(declared, logprobs=self._reports_logprobs(), batching=(slots or 1) > 1)

    def _hosted_logprobs(self) -> bool:
        reasoning = self.model.lower().startswith(_REASONING_PREFIXES)
        return not self._custom_url and self.provider.name == "openai" and not reasoning

    def _reports_logprobs(self) -> bool:
        """Whether the server answers a request for log-probabilities with them: one attempt, one token. A server
        that refuses the request, or that cannot be reached, counts as one that does not report them: its jobs
        take the schema path, which asks nothing of it that it may not do."""
        request = self._request(list(PROBE.messages), PROBE.params)
        try:
            choice = self._transport.post(request, timeout=min(self.timeout, PROBE_TIMEOUT_S)).choices[0]
        except CALL_ERRORS as exc:
            log.info("%s: no log-probabilities (%s: %s)", self.endpoint, type(exc).__name__, exc)
            return False
        reports = bool(choice.logprobs and choice.logprobs.content)
        log.info("%s %s log-probabilities", self.endpoint, "reports" if reports else "does not report")
        return reports

    # -- the schema's form ------------------------------------------------------------------------------

    def _falls_back_to_json_object(self, exc: Exception) -> bool:
        """Servers other than OpenAI's may reject ``{"type": "json_schema"}`` (llama-cpp-python's server answers
        422) but take the older ``{"type": "json_object", "schema": ...}``: switch once, for a custom URL only."""
        if not (self._custom_url and self.json_schema_style == "json_schema"):
            return False
        if not (isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422, 500)):
            return False
        if "json_schema" not in error_detail(exc) and "response_format" not in error_detail(exc):
            return False
        log.info("%s rejected response_format json_schema; using json_object with a schema", self.endpoint)
        self.json_schema_style = "json_object"
        return True

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

    # -- the three calls ---------------------------------------------------------------------------

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        start = time.perf_counter()
        reply, attempts = self._transport.call(lambda: self._transport.post(self._request(messages, params)))
        return self._result(reply, messages, time.perf_counter() - start, attempts)

    async def achat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult:
        msgs, p = as_messages(messages), params or SamplingParams()
        start = time.perf_counter()
        reply, attempts = await self._transport.acall(lambda: self._transport.apost(self._request(msgs, p)))
        return self._result(reply, msgs, time.perf_counter() - start, attempts)

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]:
        """Yield the reply's text as it arrives. Opening the stream is retried; a broken stream is not."""
        msgs, p = as_messages(messages), params or SamplingParams()
        (closing, response), attempts = self._transport.call(lambda: self._transport.open(self._request(msgs, p)))
        with closing:
            try:
                yield from self._transport.deltas(response)
            except CALL_ERRORS as exc:
                raise self._transport.translate(exc, attempts) from exc

    def count_tokens(self, text: str) -> int:
        return count_tokens(text, self.model)
