"""The one door to the remote model. Every remote call goes through ``RemoteChannel.ask``/``send``, which

- redacts the outgoing text (when asked to),
- records it in the egress log unless the backend runs in this process (``remote_leaves_device``),
- refuses to send what the budget cannot pay for (``BudgetExceededError``, nothing sent): the prompt, counted here
  (raised by ``TOKEN_MARGIN`` for a model whose own tokenizer is not OpenAI's), and the longest reply the request
  allows, at the model's price (a request's reply limit is lowered to what the budget has left, down to
  ``MIN_REPLY_TOKENS``),
- meters usage and cost under the role ``remote``,
- validates a JSON reply against a pydantic model and sends a failing one back with the error, a bounded
  number of times (then ``ModelOutputError``).

Protocols get a channel, never the remote backend itself, so none can bypass it. Nor does the remote model get
anything else: the channel reads what it can do from what it declares (``declared_capabilities``), so a server in
that role is never asked what only the local side needs (whether it reports log-probabilities, its slots).

The local model is trusted with the documents only where it is on this device (``capabilities.local``, from its
address). One on another machine is allowed, but seen through ``LocalEgress``: every prompt it is sent (the
chunks, whole), and the question its backend asks it of its own (``questions``), is recorded in the egress log with
the step ``local``, and its usage is priced.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from minions.backends.address import host_of
from minions.backends.base import (
    Backend,
    Capabilities,
    MessagesLike,
    OnResult,
    declared_capabilities,
    own_price,
    questions,
)
from minions.cost import Price, PriceTable
from minions.errors import BackendError, BudgetExceededError, ModelOutputError
from minions.events import CancelToken
from minions.tokens import TOKEN_MARGIN, count_tokens, counts_exactly
from minions.types import ChatRequest, ChatResult, Message, SamplingParams, Usage, as_messages

from .options import Budget
from .parsing import extract_json
from .prompts import render
from .redact import Redactor
from .result import LOCAL_STEP, EgressLog
from .schemas import response_schema

__all__ = [
    "MIN_REPLY_TOKENS",
    "LocalEgress",
    "Meter",
    "RemoteChannel",
    "price_of",
    "priced",
    "prompt_tokens",
    "remote_leaves_device",
]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
Check = Callable[[M], None]

MESSAGE_TOKENS = 4
"""Tokens a chat template adds to each message (its role markers) on top of its text."""
MIN_REPLY_TOKENS = 32
"""The shortest reply limit a request to the remote model goes out with: where the budget cannot pay for that
much reply after the prompt, the request is not sent."""


def prompt_tokens(messages: Sequence[Message], model: str) -> int:
    """The prompt tokens ``messages`` cost ``model``, counted on this device (``minions.tokens``)."""
    return sum(count_tokens(m.content, model) + MESSAGE_TOKENS for m in messages)


def price_of(backend: Backend, prices: PriceTable) -> Price | None:
    """What ``backend``'s calls cost: its own price where it prices them itself, else ``prices``'; None: unknown."""
    return own_price(backend) or prices.lookup(backend.name)


def remote_leaves_device(backend: Backend) -> bool:
    """Whether what the remote channel sends ``backend`` leaves the device: recorded, redacted when asked, priced.

    The remote role stands for a cloud model, so a server in that role counts wherever it listens: one on
    127.0.0.1 is a stand-in for a cloud model or a proxy to one. Only a model in this process on this device (a
    local model cast as the remote one) reads the text unrecorded."""
    return not declared_capabilities(backend).local or backend.address is not None


def priced(backend: Backend, usage: Usage, prices: PriceTable, *, on_device: bool | None = None) -> Usage:
    """``usage`` with its cost filled in from the price table when the backend did not set one; a model on this
    device (``on_device``, else its ``capabilities.local``) costs nothing."""
    if usage.cost_usd or (declared_capabilities(backend).local if on_device is None else on_device):
        return usage
    cost = prices.cost(backend.name, usage)
    return Usage(
        usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens, usage.calls, usage.seconds, cost
    )


def _timed(usage: Usage, start: float) -> Usage:
    """``usage`` with the seconds since ``start`` where the backend did not count them."""
    return usage if usage.seconds else usage + Usage(seconds=time.perf_counter() - start)


class Meter:
    """Usage by role, thread-safe."""

    def __init__(self) -> None:
        self._usage: dict[str, Usage] = {"local": Usage(), "remote": Usage()}
        self._lock = threading.Lock()

    def add(self, role: str, usage: Usage) -> None:
        with self._lock:
            self._usage[role] = self._usage.get(role, Usage()) + usage

    def __getitem__(self, role: str) -> Usage:
        return self._usage.get(role, Usage())

    def snapshot(self) -> dict[str, Usage]:
        with self._lock:
            return dict(self._usage)


class RemoteChannel:
    """The remote model, behind every check (see the module's docstring); ``capabilities`` are what it declares."""

    def __init__(
        self,
        backend: Backend,
        *,
        meter: Meter,
        egress: EgressLog,
        prices: PriceTable,
        budget: Budget | None = None,
        redactor: Redactor | None = None,
        max_retries: int = 2,
        max_tokens: int = 1024,
    ) -> None:
        self.backend = backend
        self.meter = meter
        self.egress = egress
        self.prices = prices
        self.budget = budget
        self.capabilities: Capabilities = declared_capabilities(backend)
        self.leaves_device = remote_leaves_device(backend)
        self.price = price_of(backend, prices) if self.leaves_device else None
        if budget is not None and budget.max_remote_usd is not None and self.leaves_device and self.price is None:
            log.warning("%s has no known price: the dollar budget cannot hold it (set MINIONS_PRICES)", backend.name)
        # Redaction protects what leaves the device; a model in this process sees the text as it is.
        self.redactor = redactor if self.leaves_device else None
        self.max_retries = max_retries
        self.params = SamplingParams(max_tokens=max_tokens)

    def _priced(self, usage: Usage) -> Usage:
        return priced(self.backend, usage, self.prices, on_device=not self.leaves_device)

    def restore(self, text: str) -> str:
        """Undo redaction placeholders in text that came back from the remote model."""
        return self.redactor.restore(text) if self.redactor else text

    def _within_budget(self, messages: list[Message], params: SamplingParams) -> SamplingParams:
        """``params`` with a reply limit the budget can pay for after the prompt (lowered to what it has left);
        ``BudgetExceededError`` where that is less than ``MIN_REPLY_TOKENS``: the request is not sent."""
        if self.budget is None:
            return params
        spent = self.meter["remote"]
        prompt = prompt_tokens(messages, self.backend.name)
        if not counts_exactly(self.backend.name):  # its own tokenizer may count more: the budget holds all the same
            prompt = math.ceil(prompt * TOKEN_MARGIN)
        reply = self.budget.reply_tokens(spent, prompt, self.price)
        if reply is None or reply >= params.max_tokens:
            return params
        least = Usage(prompt_tokens=prompt, completion_tokens=min(params.max_tokens, MIN_REPLY_TOKENS))
        if reply < least.completion_tokens:
            usd = spent.cost_usd + (self.price.cost(least) if self.price else 0.0)
            reason = self.budget.exceeded(spent.total_tokens + least.total_tokens, usd) or "remote budget reached"
            raise BudgetExceededError(f"Stopped: {reason}.", spent_tokens=spent.total_tokens, spent_usd=spent.cost_usd)
        log.info("remote reply limited to %d tokens (of %d): what the budget has left", reply, params.max_tokens)
        return params.with_(max_tokens=reply)

    def send(
        self, messages: list[Message], *, step: str, round: int, params: SamplingParams | None = None
    ) -> ChatResult:
        """One remote call, through every check. ``messages`` are as the protocol wrote them."""
        if self.redactor is not None:
            messages = [Message(m.role, self.redactor.redact(m.content)) for m in messages]
        params = self._within_budget(messages, params or self.params)
        if self.leaves_device:
            host = host_of(self.backend.address)
            for m in messages:
                self.egress.record(round, f"{step}:{m.role}", self.backend.name, m.content, host)
        start = time.perf_counter()
        try:
            result = self.backend.chat(messages, params)
        except BackendError as exc:  # it went out, as many times as it was tried: counted, with what it cost
            spent = _timed(self._priced(exc.usage or Usage()), start)  # a timeout has no tokens, but took its time
            self.meter.add("remote", replace(spent, calls=max(spent.calls, exc.attempts)))
            raise
        usage = _timed(self._priced(result.usage), start)
        # a request the backend sent again (after a transient failure, or in a form the server takes) went out
        # each time
        self.meter.add("remote", replace(usage, calls=max(usage.calls, int(result.stats.get("attempts", 1)))))
        return result

    def ask(
        self, messages: list[Message], schema: type[M], *, step: str, round: int, check: Check[M] | None = None
    ) -> M:
        """A reply that validates as ``schema`` (and passes ``check``), retrying with the error."""
        params = self.params
        if self.capabilities.json_schema:
            params = params.with_(json_schema=response_schema(schema))
        history = list(messages)
        error, reply = "", ""
        for attempt in range(self.max_retries + 1):
            result = self.send(
                history, step=step if attempt == 0 else f"{step}-retry{attempt}", round=round, params=params
            )
            reply = result.text
            try:
                value = schema.model_validate(extract_json(reply))
                if check is not None:
                    check(value)
                return value
            except (ValueError, ValidationError) as exc:  # ValidationError is a ValueError; named for clarity
                error = _short_error(exc)
                log.info("remote %s reply rejected (attempt %d): %s", step, attempt + 1, error)
                history += [Message("assistant", reply or "(empty)"), Message("user", render("fix_json", error=error))]
        raise ModelOutputError(
            f"The remote model's {step} reply did not validate after {self.max_retries + 1} attempts: {error}",
            backend=self.backend.name,
            attempts=self.max_retries + 1,
            usage=self.meter["remote"],
            raw=reply,
        )


class LocalEgress:
    """The local backend, for a local model that is not on this device: every prompt sent to it is recorded in
    the egress log (step ``local``, the messages joined), with where it went; everything else passes through.
    A batch's jobs that were cancelled before they ran were never sent and are not recorded. The question the
    backend sends the model of its own the first time its capabilities are read (``questions``) is recorded too,
    and with a ``meter`` counted (and priced at ``prices``) as local usage."""

    def __init__(
        self,
        backend: Backend,
        egress: EgressLog,
        round: Callable[[], int],
        meter: Meter | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.backend = backend
        self.name = backend.name
        self.address = backend.address
        self._egress = egress
        self._round = round
        self._host = host_of(backend.address)
        self._meter, self._prices = meter, prices
        self._asking = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        """The backend's, with what reading them sends the model (the first time) recorded as it goes out."""
        with self._asking:
            for request in questions(self.backend):
                self._record(request.messages)
                if self._meter is not None:
                    usage = Usage(prompt_tokens(request.messages, self.name), request.params.max_tokens, calls=1)
                    self._meter.add("local", priced(self.backend, usage, self._prices or PriceTable(), on_device=False))
            return self.backend.capabilities

    @capabilities.setter
    def capabilities(self, declared: Capabilities) -> None:
        self.backend.capabilities = declared

    def _record(self, messages: MessagesLike) -> None:
        text = "\n\n".join(m.content for m in as_messages(messages))
        self._egress.record(self._round(), LOCAL_STEP, self.name, text, self._host)

    def chat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult:
        self._record(messages)
        return self.backend.chat(messages, params)

    async def achat(self, messages: MessagesLike, params: SamplingParams | None = None) -> ChatResult:
        self._record(messages)
        return await self.backend.achat(messages, params)

    def batch(
        self, requests: Sequence[ChatRequest], *, on_result: OnResult | None = None, cancel: CancelToken | None = None
    ) -> list[ChatResult]:
        results: list[ChatResult] | None = None
        try:
            results = self.backend.batch(requests, on_result=on_result, cancel=cancel)
            return results
        finally:  # a batch that failed as a whole may have sent any of its prompts: all are recorded
            for i, request in enumerate(requests):
                if results is None or results[i].finish_reason != "cancelled":
                    self._record(request.messages)

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]:
        self._record(messages)
        return self.backend.stream(messages, params)

    def parameter_count(self) -> int | None:
        return self.backend.parameter_count()

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)


def _short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:5])
    return str(exc)
