"""The one interface every model client implements.

A backend is a small object with a name, its declared capabilities and these calls:

- ``chat(messages, params) -> ChatResult``
- ``async achat(messages, params) -> ChatResult``
- ``batch(requests) -> list[ChatResult]`` for many independent prompts, in order; a failed job comes back
  as a result with ``finish_reason="error"`` rather than raising, so finished jobs are never lost.
- ``stream(messages, params) -> Iterator[str]``: the reply's text as it comes (in one piece where the backend
  does not stream: ``capabilities.streaming`` says whether it does).
- ``parameter_count() -> int | None``: the model's size, where the model file or the server tells it.

Protocols branch on ``capabilities``, never on the class. A backend whose server is asked some of them on their
first read (``AskingBackend``, a fleet of them) also says what is known without asking and what asking would send
(``declared_capabilities``, ``questions``): a remote model is never asked what only the local side needs, and a
local model on another machine has its question recorded with its prompts.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from minions.cost import Price
from minions.errors import BackendError
from minions.events import CancelToken
from minions.types import ChatRequest, ChatResult, Message, SamplingParams, Timings, Usage, as_messages

__all__ = [
    "PROBE",
    "AskingBackend",
    "Asks",
    "Backend",
    "BaseBackend",
    "Capabilities",
    "MessagesLike",
    "OnResult",
    "Priced",
    "cancelled_result",
    "declared_capabilities",
    "error_result",
    "own_price",
    "questions",
]

log = logging.getLogger(__name__)

MessagesLike = Iterable[Message | Mapping[str, Any]] | str
OnResult = Callable[[int, ChatResult], None]

PROBE = ChatRequest((Message("user", "Hi"),), SamplingParams(max_tokens=1, logprobs=1))
"""The one request that finds out whether a server reports log-probabilities (one token back)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    json_schema: bool = False
    """Replies can be constrained to a JSON schema."""
    logprobs: bool = False
    batching: bool = False
    """``batch`` runs jobs together natively (not one after another)."""
    streaming: bool = False
    local: bool = False
    """Runs on this device: text sent to it does not leave the machine. Backends with an address set it from
    the address (``backends.address.on_this_device``), never from their name."""
    context_window: int = 8192


@runtime_checkable
class Backend(Protocol):
    name: str
    """``provider/model``, as the registry spells it."""
    capabilities: Capabilities

    @property
    def address(self) -> str | None:
        """Where the model is served (its base URL), or None for a model in this process."""
        ...

    def chat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult: ...

    async def achat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult: ...

    def batch(
        self, requests: Sequence[ChatRequest], *, on_result: OnResult | None = None, cancel: CancelToken | None = None
    ) -> list[ChatResult]: ...

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]: ...

    def parameter_count(self) -> int | None:
        """The model's parameters (from its GGUF metadata, or the server's description of it); None where unknown."""
        ...

    def count_tokens(self, text: str) -> int: ...


@runtime_checkable
class Asks(Protocol):
    """A backend that asks its server some of its capabilities the first time ``capabilities`` is read."""

    @property
    def declared(self) -> Capabilities:
        """The capabilities known without asking: as declared until the server was asked, then as it answered."""
        ...

    def questions(self) -> list[ChatRequest]:
        """The requests with text that the first read of ``capabilities`` sends; none once it has been read."""
        ...


@runtime_checkable
class Priced(Protocol):
    """A backend that prices its own calls (a ``ChatResult`` whose ``usage`` carries ``cost_usd``), at ``price``
    per million tokens."""

    @property
    def price(self) -> Price | None: ...


def declared_capabilities(backend: Backend) -> Capabilities:
    """What ``backend`` can do as far as is known without sending its server anything (``Asks.declared``, else its
    ``capabilities``). Whether a server reports log-probabilities or runs requests together matters to the local
    side only: a remote model is read through this, and never asked."""
    return backend.declared if isinstance(backend, Asks) else backend.capabilities


def questions(backend: Backend) -> list[ChatRequest]:
    """The requests the first read of ``capabilities`` would still send its server (``Asks.questions``)."""
    return backend.questions() if isinstance(backend, Asks) else []


def own_price(backend: Backend) -> Price | None:
    """The price ``backend`` charges its calls at, where it prices them itself (``Priced``); None: a price table's."""
    return backend.price if isinstance(backend, Priced) else None


def error_result(model: str, exc: BaseException) -> ChatResult:
    usage = exc.usage if isinstance(exc, BackendError) and exc.usage else Usage()
    return ChatResult(
        text="",
        usage=usage,
        finish_reason="error",
        timings=Timings(),
        model=model,
        error=f"{type(exc).__name__}: {exc}",
        exception=exc,
    )


def cancelled_result(model: str) -> ChatResult:
    return ChatResult(
        text="",
        usage=Usage(),
        finish_reason="cancelled",
        timings=Timings(),
        model=model,
        error="cancelled before it ran",
    )


class BaseBackend:
    """Defaults shared by the concrete backends: ``achat`` on a thread and a ``batch`` that never raises.

    Subclasses implement ``_chat(messages, params)``; ``max_concurrency`` bounds the batch's threads
    (1 for a local model that is compute-bound anyway, more for a remote server).
    """

    name: str = "base"
    capabilities: Capabilities = Capabilities()
    address: str | None = None
    max_concurrency: int = 1

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        raise NotImplementedError

    def chat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult:
        return self._chat(as_messages(messages), params or SamplingParams())

    async def achat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult:
        return await asyncio.to_thread(self.chat, messages, params)

    def batch(
        self, requests: Sequence[ChatRequest], *, on_result: OnResult | None = None, cancel: CancelToken | None = None
    ) -> list[ChatResult]:
        return self._run_batch(requests, self._chat, on_result, cancel)

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]:
        """The reply in one piece; backends that stream (``capabilities.streaming``) yield it as it comes."""
        yield self.chat(messages, params).text

    def parameter_count(self) -> int | None:
        return None

    def _run_batch(
        self,
        requests: Sequence[ChatRequest],
        call: Callable[[list[Message], SamplingParams], ChatResult],
        on_result: OnResult | None,
        cancel: CancelToken | None,
    ) -> list[ChatResult]:
        """``call`` for every job, ``max_concurrency`` at a time, in order; a ``BackendError`` becomes its result."""

        def one(i: int) -> ChatResult:
            req = requests[i]
            if cancel is not None and cancel.cancelled:
                return cancelled_result(self.name)
            try:
                result = call(list(req.messages), req.params)
            except BackendError as exc:
                log.warning("job %d failed on %s: %s", i, self.name, exc)
                result = error_result(self.name, exc)
            if on_result is not None:
                on_result(i, result)
            return result

        if self.max_concurrency <= 1 or len(requests) <= 1:
            return [one(i) for i in range(len(requests))]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(one, range(len(requests))))

    def count_tokens(self, text: str) -> int:
        from minions.tokens import count_tokens

        return count_tokens(text)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class AskingBackend(BaseBackend):
    """A backend whose server may or may not report log-probabilities, and is asked, once: the first read of
    ``capabilities`` sends the question (``_reports_logprobs``, which subclasses implement); assigning
    ``capabilities`` declares them outright, and the server is not asked. Subclasses call ``_declare`` first."""

    def _declare(self, capabilities: Capabilities, *, ask: bool) -> None:
        """``capabilities`` as known now; ``ask``: whether ``logprobs`` is still the server's to say."""
        self._capabilities, self._logprobs_known = capabilities, not ask
        self._asking = threading.Lock()  # held while the server is asked

    @property
    def capabilities(self) -> Capabilities:
        if not self._logprobs_known:
            with self._asking:
                if not self._logprobs_known:
                    self._capabilities = self._asked(self._capabilities)
                    self._logprobs_known = True
        return self._capabilities

    @capabilities.setter
    def capabilities(self, declared: Capabilities) -> None:
        self._capabilities, self._logprobs_known = declared, True

    @property
    def declared(self) -> Capabilities:
        """The capabilities as declared, or as the server answered once it was asked; reading them asks nothing."""
        return self._capabilities

    def questions(self) -> list[ChatRequest]:
        """``PROBE``, until the server has been asked (``_reports_logprobs``)."""
        return [] if self._logprobs_known else [PROBE]

    def _asked(self, declared: Capabilities) -> Capabilities:
        """``declared`` with what the server says it does: whether it reports log-probabilities (subclasses that
        ask it more add to it)."""
        return replace(declared, logprobs=self._reports_logprobs())

    def _reports_logprobs(self) -> bool:
        """Whether the server answers a request for log-probabilities with them."""
        raise NotImplementedError

    def prompt_tokens(self, requests: Sequence[ChatRequest]) -> list[int]:
        """The prompt tokens each of ``requests`` would have the server compute: all of them, counted with this
        backend's tokenizer (an estimate of the server's own): a server keeps at most the state of its last
        prompt, whose system prompt alone a job over another chunk shares."""
        return [sum(self.count_tokens(m.content) for m in r.messages) for r in requests]
