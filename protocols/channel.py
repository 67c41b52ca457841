"""The one door to the remote model. Every remote call goes through ``RemoteChannel.ask``/``send``, which

- redacts the outgoing text (when asked to),
- records it in the egress log when the backend does not run on this device,
- refuses to send what the budget cannot pay for (``BudgetExceededError``, nothing sent),
- meters usage and cost under the role ``remote``,
- validates a JSON reply against a pydantic model and sends a failing one back with the error, a bounded
  number of times (then ``ModelOutputError``).

Protocols get a channel, never the remote backend itself, so none can bypass it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from minions.backends.base import Backend
from minions.cost import PriceTable
from minions.errors import BudgetExceededError, ModelOutputError
from minions.types import ChatResult, Message, SamplingParams, Usage

from .options import Budget
from .parsing import extract_json
from .prompts import render
from .redact import Redactor
from .result import EgressLog
from .schemas import response_schema

__all__ = ["Meter", "RemoteChannel", "priced"]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
Check = Callable[[M], None]


def priced(backend: Backend, usage: Usage, prices: PriceTable) -> Usage:
    """``usage`` with its cost filled in from the price table when the backend did not set one."""
    if usage.cost_usd or backend.capabilities.local:
        return usage
    cost = prices.cost(backend.name, usage)
    return Usage(
        usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens, usage.calls, usage.seconds, cost
    )


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
        # Redaction protects what leaves the device; a backend on this device sees the text as it is.
        self.redactor = redactor if not backend.capabilities.local else None
        self.max_retries = max_retries
        self.params = SamplingParams(max_tokens=max_tokens)

    @property
    def leaves_device(self) -> bool:
        return not self.backend.capabilities.local

    def restore(self, text: str) -> str:
        """Undo redaction placeholders in text that came back from the remote model."""
        return self.redactor.restore(text) if self.redactor else text

    def _check_budget(self, messages: list[Message]) -> None:
        if self.budget is None:
            return
        spent = self.meter["remote"]
        prompt = sum(self.backend.count_tokens(m.content) for m in messages)
        usd = spent.cost_usd + priced(self.backend, Usage(prompt_tokens=prompt), self.prices).cost_usd
        reason = self.budget.exceeded(spent.total_tokens + prompt, usd)
        if reason:
            raise BudgetExceededError(f"Stopped: {reason}.", spent_tokens=spent.total_tokens, spent_usd=spent.cost_usd)

    def send(
        self, messages: list[Message], *, step: str, round: int, params: SamplingParams | None = None
    ) -> ChatResult:
        """One remote call, through every check. ``messages`` are as the protocol wrote them."""
        if self.redactor is not None:
            messages = [Message(m.role, self.redactor.redact(m.content)) for m in messages]
        self._check_budget(messages)
        if self.leaves_device:
            for m in messages:
                self.egress.record(round, f"{step}:{m.role}", self.backend.name, m.content)
        start = time.perf_counter()
        result = self.backend.chat(messages, params or self.params)
        usage = priced(self.backend, result.usage, self.prices)
        if not usage.seconds:
            usage = usage + Usage(seconds=time.perf_counter() - start)
        self.meter.add("remote", usage)
        return result

    def ask(
        self, messages: list[Message], schema: type[M], *, step: str, round: int, check: Check[M] | None = None
    ) -> M:
        """A reply that validates as ``schema`` (and passes ``check``), retrying with the error."""
        params = self.params
        if self.backend.capabilities.json_schema:
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


def _short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:5])
    return str(exc)
