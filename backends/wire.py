"""What comes back over the wire, checked before anything reads it.

A server, or a proxy in front of it, may answer HTTP 200 with an HTML page, JSON cut off mid-way or a
completion without choices. The models here are the fields of OpenAI's chat-completion replies that the
backends use, validated (other fields, which servers add freely, are ignored); ``glimpse`` shows what came
back instead, on one line, for the error message.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["SHOWN_BYTES", "Completion", "Delta", "Logprobs", "first_error", "glimpse", "logprob_steps", "sse_data"]

SHOWN_BYTES = 80
"""How much of a malformed reply an error message shows."""


def glimpse(content_type: str | None, body: bytes) -> str:
    """What came back, on one line: its content type and its first bytes (and its size when that is more)."""
    head = body[:SHOWN_BYTES].decode("utf-8", "replace")
    more = f"... ({len(body)} bytes)" if len(body) > SHOWN_BYTES else ""
    return f"content-type {content_type or 'none'}, body {head!r}{more}"


def first_error(exc: ValidationError) -> str:
    """The first thing wrong with a reply, as ``field.path: what``."""
    e = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in e["loc"])
    return f"{where}: {e['msg']}" if where else e["msg"]


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each server-sent event (its ``data:`` lines joined); comments and other fields are skipped."""
    data: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield "\n".join(data)
            data = []
    if data:
        yield "\n".join(data)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Message(_Wire):
    content: str | None = None


class _TopLogprob(_Wire):
    token: str
    logprob: float


class _TokenLogprob(_Wire):
    token: str
    logprob: float
    top_logprobs: list[_TopLogprob] = []


class Logprobs(_Wire):
    """The log-probabilities of a reply's tokens (a choice's or a stream event's ``logprobs``), where asked for."""

    content: list[_TokenLogprob] | None = None


class _Alternative(Protocol):
    @property
    def token(self) -> str: ...
    @property
    def logprob(self) -> float: ...


class _Token(_Alternative, Protocol):
    @property
    def top_logprobs(self) -> Sequence[_Alternative] | None: ...


def logprob_steps(tokens: Iterable[_Token]) -> list[list[list[str | float]]]:
    """A reply's tokens with their alternatives (OpenAI's ``logprobs.content``, Ollama's ``logprobs``) as
    ``ChatResult.stats["logprobs"]`` holds them: one entry per token, ``[[token_text, logprob], ...]``, most likely
    first (servers list them in any order); a token reported without alternatives is its own only one."""
    steps: list[list[list[str | float]]] = []
    for token in tokens:
        top = list(token.top_logprobs or ()) or [token]
        steps.append([[t.token, t.logprob] for t in sorted(top, key=lambda t: -t.logprob)])
    return steps


class _Choice(_Wire):
    message: _Message
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class _TokenDetails(_Wire):
    cached_tokens: int | None = None


class _Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _TokenDetails | None = None


class Completion(_Wire):
    """A chat completion."""

    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


class _DeltaContent(_Wire):
    content: str | None = None


class _DeltaChoice(_Wire):
    delta: _DeltaContent = Field(default_factory=_DeltaContent)
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class Delta(_Wire):
    """One event of a streamed completion (the last may carry only usage, and no choices)."""

    choices: list[_DeltaChoice] = []
    error: Any = None
    """Some servers report a failure mid-stream as an event with an ``error`` instead of choices."""
