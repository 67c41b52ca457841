"""Core value types: messages, sampling parameters, usage, timings and the result of one model call."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

__all__ = [
    "ChatRequest",
    "ChatResult",
    "Message",
    "PromptPrefix",
    "Role",
    "SamplingParams",
    "Timings",
    "Usage",
    "as_messages",
    "reply_start",
]

Role = Literal["system", "user", "assistant"]
FinishReason = Literal["stop", "length", "error", "cancelled"]


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def reply_start(messages: Sequence[Message]) -> str | None:
    """The start of the reply, when the last message is the assistant's (``ChatRequest``); else None."""
    return messages[-1].content if messages and messages[-1].role == "assistant" else None


def as_messages(messages: Iterable[Message | Mapping[str, Any]] | str) -> list[Message]:
    """Accept a prompt string, ``Message`` objects or OpenAI-style dicts; return ``Message`` objects."""
    if isinstance(messages, str):
        return [Message("user", messages)]
    out: list[Message] = []
    for m in messages:
        if isinstance(m, Message):
            out.append(m)
        else:
            role, content = m.get("role"), m.get("content")
            if role not in ("system", "user", "assistant") or not isinstance(content, str):
                raise ValueError(f"A message needs role system|user|assistant and text content, got {dict(m)!r}")
            out.append(Message(role, content))
    return out


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to decode. Defaults are greedy, which is what extraction jobs want."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None
    json_schema: Mapping[str, Any] | None = None
    """Constrain the reply to this JSON schema (backends declare whether they can)."""
    logprobs: int = 0
    """Report this many most likely tokens, with their log-probabilities, at each generated position: the result's
    ``stats["logprobs"]`` is a list (one entry per token) of ``[[token_text, logprob], ...]``, most likely first
    (backends that declare ``logprobs``)."""

    def with_(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens, calls, seconds and dollars. Immutable; ``a + b`` adds every field."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    calls: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __radd__(self, other: object) -> Usage:
        # sum() starts from 0
        if other == 0:
            return self
        return NotImplemented

    def to_dict(self) -> dict[str, float | int]:
        d: dict[str, float | int] = {f.name: getattr(self, f.name) for f in fields(self)}
        d["total_tokens"] = self.total_tokens
        return d


@dataclass(frozen=True, slots=True)
class Timings:
    """Wall-clock seconds of one call; ``prefill`` and ``decode`` are 0 where a backend cannot tell them apart."""

    total_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PromptPrefix:
    """Where the part of a prompt that other prompts share ends: after the first ``chars`` characters of
    ``messages[message]`` (the whole message when ``chars`` is None). A backend that keeps prompt state (the local
    engine saves it to disk) keeps the state of that prefix, so the next prompt that starts with it, in this run or
    a later one, does not compute it again. Other backends ignore it."""

    message: int
    chars: int | None = None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One independent prompt of a batch call. A last message from the assistant is the start of the reply: the
    embedded engines (llama.cpp, PyTorch) go on from its text; other servers differ."""

    messages: Sequence[Message]
    params: SamplingParams = field(default_factory=SamplingParams)
    prefix: PromptPrefix | None = None
    """The shared prefix worth keeping (a document chunk before the question), if any."""

    def shared_text(self) -> tuple[str, ...] | None:
        """The text of the marked ``prefix`` (the messages before it, then the start of its own); None where none
        is marked. Requests with the same shared text share a prompt state wherever one is kept."""
        if self.prefix is None:
            return None
        head = [m.content for m in self.messages[: self.prefix.message]]
        return (*head, self.messages[self.prefix.message].content[: self.prefix.chars])


@dataclass(frozen=True, slots=True)
class ChatResult:
    """The result of one model call. Every backend fills every field.

    A failed job inside a batch comes back as a ``ChatResult`` with ``finish_reason="error"`` and ``error`` set,
    so a batch never loses its finished jobs to one failure.
    """

    text: str
    usage: Usage
    finish_reason: FinishReason
    timings: Timings
    model: str
    error: str | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    """Backend-specific numbers (speculative decoding counters, cache hits, ...)."""
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """The exception a failed job raised, when the backend has one (``error`` is its text, for logs and JSON)."""

    @property
    def ok(self) -> bool:
        return self.finish_reason not in ("error", "cancelled")

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "usage": self.usage.to_dict(),
            "finish_reason": self.finish_reason,
            "timings": {
                "total_s": self.timings.total_s,
                "prefill_s": self.timings.prefill_s,
                "decode_s": self.timings.decode_s,
            },
            "model": self.model,
            "error": self.error,
            "stats": dict(self.stats),
        }
