"""An OpenAI-compatible API: any client of ``/v1/chat/completions`` can use minions as if it were a model.

- The model name picks the protocol: ``minions``, ``minion``, ``remote``, ``local`` or ``rag``. Without a remote
  model (``--remote``, ``MINIONS_REMOTE`` or the app's settings) only ``local`` is listed and runs; naming
  another is a 400 that says how to configure one.
- The question is the last user message. Earlier messages (system or user) of at least
  ``LONG_CONTENT_CHARS`` characters are documents; so is a long last user message, whose last paragraph is
  then the question. Shorter earlier messages (a system prompt, earlier turns) are not used.
- ``documents`` (an extra body field: ids or names from the library) adds library documents; with no
  document in the messages and no ``documents`` field, the whole library is used.
- ``usage`` is the run's, local and remote together; an extra ``minions`` field has the run's citations,
  usage by role, cost, saving and egress.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from minions.documents import Document
from minions.events import Event
from minions.protocols import PROTOCOLS, InputError, missing_remote
from minions.unicode import replaced_note

from .runs import Outcome, RunRequest
from .state import ApiError, AppState, error_body, sse, state_of, status_for

__all__ = ["LONG_CONTENT_CHARS", "ChatCompletionRequest", "router", "split_messages"]

LONG_CONTENT_CHARS = 2000
MAX_QUESTION_CHARS = 4000
REMOTE_HOW = "start minions serve with --remote provider/model or set MINIONS_REMOTE, or use the model local"

router = APIRouter(prefix="/v1")


class ChatMessage(BaseModel):
    # Clients send fields we have no use for (name, tool_calls, ...); refusing them would refuse the clients.
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"Only text content is supported, not {part.get('type')!r}.", param="messages")
            parts.append(part["text"])
        return "\n".join(parts)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    # Sampling fields (temperature, top_p, max_tokens, seed, ...) belong to one model call; a protocol run makes
    # many, with its own settings, so they are accepted and not used. Fields that ask for a different kind of
    # reply (tool calls, several choices, log-probabilities, JSON) are refused by ``unsupported``.
    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    documents: list[str] | None = None
    """Library documents to use, by id or name (minions' extension)."""
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    logit_bias: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    modalities: list[str] | None = None
    audio: Any = None

    def unsupported(self) -> tuple[str, str] | None:
        """The first field this server cannot honour, and why, as (param, message); None when it can."""
        answer = "a run answers in text, from the documents"
        refusals = [
            ("n", self.n != 1, "n must be 1: a run gives one answer."),
            ("tools", bool(self.tools) or bool(self.functions), f"Tools are not supported: {answer}."),
            ("tool_choice", self.tool_choice not in (None, "none"), f"tool_choice is not supported: {answer}."),
            ("function_call", self.function_call not in (None, "none"), f"function_call is not supported: {answer}."),
            ("logit_bias", bool(self.logit_bias), "logit_bias is not supported: a run makes many model calls."),
            ("logprobs", bool(self.logprobs) or bool(self.top_logprobs), "logprobs are not supported: a run "
             "makes many model calls, and its answer's tokens are not one model's."),
            ("response_format", (self.response_format or {}).get("type", "text") != "text",
             f"response_format must be text: {answer} and cannot promise JSON."),
            ("modalities", any(m != "text" for m in self.modalities or ()), f"Only text is supported: {answer}."),
            ("audio", self.audio is not None, f"Audio output is not supported: {answer}."),
        ]  # fmt: skip
        return next(((param, message) for param, refused, message in refusals if refused), None)


def split_messages(messages: list[ChatMessage]) -> tuple[str, list[Document], list[Document]]:
    """The question, the documents carried by the messages, and the shorter earlier system and user messages,
    which are documents only when nothing else is (see the module docstring)."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last is None:
        raise ApiError(400, "No user message: the last user message is the question.", param="messages")
    docs, short = [], []
    for i, m in enumerate(messages[:last]):
        text = m.text()
        if len(text) >= LONG_CONTENT_CHARS:
            docs.append(Document.from_text(text, name=f"message-{i + 1}.txt"))
        elif text.strip() and m.role in ("system", "developer", "user"):
            short.append(Document.from_text(text, name=f"message-{i + 1}.txt"))
    question = messages[last].text().strip()
    if len(question) >= LONG_CONTENT_CHARS:
        body, _, tail = question.rpartition("\n\n")
        if not body.strip() or not tail.strip() or len(tail) > MAX_QUESTION_CHARS:
            raise ApiError(
                400,
                "A long user message is read as a document with the question as its last "
                "paragraph: end it with a blank line and the question.",
                param="messages",
            )
        docs.append(Document.from_text(body, name=f"message-{last + 1}.txt"))
        question = tail.strip()
    if not question:
        raise ApiError(400, "The last user message is empty: it should hold the question.", param="messages")
    return question, docs, short


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    """The protocols that run with the configured models."""
    settings = state_of(request).settings()
    usable = [name for name in PROTOCOLS if settings.can_run(name)]
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "minions"} for name in usable],
    }


@router.post("/chat/completions", response_model=None)
async def chat_completions(body: ChatCompletionRequest, request: Request) -> dict[str, Any] | StreamingResponse:
    state = state_of(request)
    protocol = body.model.strip().lower()
    if protocol not in PROTOCOLS:
        raise ApiError(
            404,
            f"The model {body.model!r} does not exist: use one of {', '.join(PROTOCOLS)} "
            "(the model name picks the protocol).",
            code="model_not_found",
            param="model",
        )
    settings = state.settings()
    if not settings.can_run(protocol):
        raise ApiError(400, missing_remote(protocol, REMOTE_HOW), code="model_not_available", param="model")
    refused = body.unsupported()
    if refused is not None:
        param, message = refused
        raise ApiError(400, message, code="unsupported_parameter", param=param)
    question, inline, short = split_messages(body.messages)
    ids = state.library.resolve_names(body.documents) if body.documents is not None else None
    notes = _replaced_notes(request)
    if not inline and not (ids if ids is not None else state.library.records()):
        if not short:
            raise ApiError(
                400,
                "No documents: put a document in the messages, name library documents in "
                "`documents`, or add documents to the library.",
                param="documents",
            )
        inline = short
        names = ", ".join(d.name for d in short)
        notes.append(
            f"No document was given, so the earlier messages ({names}) were read as the documents; messages "
            f"shorter than {LONG_CONTENT_CHARS} characters are otherwise instructions, not documents."
        )
    run = RunRequest(question, _documents(state, inline, ids), settings.model_copy(update={"protocol": protocol}))
    completion = _Completion(protocol, notes)
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(
            completion.chunks(state, run, include_usage),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    outcome = await asyncio.to_thread(state.runner.run, run)
    if outcome.status == "error":
        status = status_for(outcome.exception) if outcome.exception is not None else 502
        raise ApiError(status, outcome.text, type="invalid_request_error" if status < 500 else "server_error")
    return completion.response(outcome)


def _replaced_notes(request: Request) -> list[str]:
    """A note on the characters of the request that were not valid Unicode (``apps.limits``), if any."""
    replaced = int(getattr(request.state, "replaced_characters", 0))
    return [replaced_note(replaced, "the request")] if replaced else []


def _documents(state: AppState, inline: list[Document], ids: list[str] | None) -> Callable[[], list[Document]]:
    def load() -> list[Document]:
        library = state.library.documents(ids) if ids is not None or not inline else []
        docs = inline + library
        if not docs:
            raise InputError(
                "No documents: put a document in the messages, name library documents in "
                "`documents`, or add documents to the library."
            )
        return docs

    return load


class _Completion:
    """The response objects of one completion, in OpenAI's shapes."""

    def __init__(self, model: str, notes: list[str]) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.notes = notes
        """What the request's handling changed, ahead of the run's own notes."""

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def response(self, outcome: Outcome) -> dict[str, Any]:
        return {
            **self._head("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": outcome.text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": _usage(outcome),
            "minions": _extra(outcome, self.notes),
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse({**self._head("chat.completion.chunk"), "choices": [choice], **extra})

    async def chunks(self, state: AppState, run: RunRequest, include_usage: bool) -> AsyncIterator[str]:
        """Progress as SSE comments while the run works (clients skip them), then the answer, then [DONE]."""
        yield self._chunk({"role": "assistant", "content": ""})
        stream = state.runner.stream(run)
        try:
            async for item in stream:
                yield self._frame(item, include_usage)
        finally:
            await stream.aclose()  # the client left: cancel the run
        yield "data: [DONE]\n\n"

    def _frame(self, item: Event | Outcome | None, include_usage: bool) -> str:
        """The SSE text for one item of the run's stream (an answer is several chunks)."""
        if item is None:
            return ": keep-alive\n\n"
        if isinstance(item, Event):
            return f": {json.dumps(item.to_dict(), ensure_ascii=False, default=str)}\n\n"
        if item.status == "error":
            client_error = item.exception is not None and status_for(item.exception) < 500
            return sse(error_body(item.text, type="invalid_request_error" if client_error else "server_error"))
        frames = [self._chunk({"content": piece}) for piece in re.findall(r"\s*\S+", item.text) or [item.text]]
        frames.append(self._chunk({}, "stop", minions=_extra(item, self.notes)))
        if include_usage:
            frames.append(sse({**self._head("chat.completion.chunk"), "choices": [], "usage": _usage(item)}))
        return "".join(frames)


def _usage(outcome: Outcome) -> dict[str, int]:
    total = outcome.result.total_usage if outcome.result else None
    prompt, completion = (total.prompt_tokens, total.completion_tokens) if total else (0, 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _extra(outcome: Outcome, notes: list[str]) -> dict[str, Any]:
    r = outcome.result
    if r is None:
        return {"status": outcome.status, "notes": notes}
    return {
        "status": outcome.status,
        "protocol": r.protocol,
        "complete": r.complete,
        "notes": [*notes, *r.notes],
        "documents": list(outcome.documents),
        "citations": [c.to_dict() for c in r.citations],
        "usage_by_role": {role: u.to_dict() for role, u in r.usage.items()},
        "cost_usd": r.cost_usd,
        "remote_only_estimate_usd": r.remote_only_estimate.cost_usd if r.remote_only_estimate else None,
        "saving_usd": r.saving_usd,
        "egress": [e.to_dict() for e in r.egress],
        "local_egress": r.local_egress,
        "embed_egress": r.embed_egress,
    }
