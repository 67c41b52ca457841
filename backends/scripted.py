"""A scriptable backend for tests of protocol logic: queue replies (or errors), read back what was asked.

    fake = ScriptedBackend("scripted/remote")
    fake.enqueue('{"answer": "42"}', RateLimitError("slow down"))
    fake.chat("question").text            # '{"answer": "42"}'
    fake.history[0].messages[-1].content  # 'question'

A ``responder(messages, params)`` answers whatever the queue does not, so a test can script replies by
content (useful for batches whose order is not the test's business). ``address`` plays a server's URL (nothing
is contacted): with one that is not on this device, the fake is a model on another machine; ``parameters`` plays
the model's size (``parameter_count``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from minions.cost import Price
from minions.tokens import count_tokens
from minions.types import ChatResult, Message, SamplingParams, Timings, Usage

from .address import on_this_device
from .base import BaseBackend, Capabilities

__all__ = ["ScriptedBackend", "ScriptedCall"]

Reply = str | BaseException
Responder = Callable[[list[Message], SamplingParams], Reply]


@dataclass(frozen=True)
class ScriptedCall:
    messages: list[Message]
    params: SamplingParams

    @property
    def prompt(self) -> str:
        return "\n".join(m.content for m in self.messages)


class ScriptedBackend(BaseBackend):
    def __init__(
        self,
        name: str = "scripted/model",
        replies: tuple[Reply, ...] = (),
        *,
        responder: Responder | None = None,
        capabilities: Capabilities | None = None,
        price: Price | None = None,
        max_concurrency: int = 1,
        address: str | None = None,
        parameters: int | None = None,
    ) -> None:
        self.name = name
        self.parameters = parameters
        self.address = address
        local = on_this_device(address)
        self.capabilities = capabilities or Capabilities(json_schema=True, batching=True, local=local)
        self.price = price
        self.max_concurrency = max_concurrency
        self.responder = responder
        self._queue: deque[Reply] = deque(replies)
        self._lock = threading.Lock()
        self.history: list[ScriptedCall] = []

    def parameter_count(self) -> int | None:
        """``parameters`` as given: the model size a test plays."""
        return self.parameters

    def enqueue(self, *replies: Reply) -> ScriptedBackend:
        with self._lock:
            self._queue.extend(replies)
        return self

    def _next(self, messages: list[Message], params: SamplingParams) -> Reply:
        with self._lock:
            self.history.append(ScriptedCall(messages, params))
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            return self.responder(messages, params)
        raise AssertionError(f"{self.name}: no scripted reply left for {messages[-1].content[:80]!r}")

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        reply = self._next(messages, params)
        if isinstance(reply, BaseException):
            raise reply
        usage = Usage(
            prompt_tokens=sum(count_tokens(m.content) for m in messages),
            completion_tokens=count_tokens(reply),
            calls=1,
        )
        if self.price is not None:
            usage = Usage(usage.prompt_tokens, usage.completion_tokens, calls=1, cost_usd=self.price.cost(usage))
        return ChatResult(text=reply, usage=usage, finish_reason="stop", timings=Timings(), model=self.name)
