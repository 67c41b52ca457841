"""Running a protocol for the app: the settings it runs with, the models it runs on, and a worker thread whose
events reach an async stream through a queue.

A run is CPU-bound (llama.cpp) and blocking, so it never runs on the event loop. Runs go one at a time: a
local model has one set of cores, and a second run would only slow both. A client that goes away cancels its
run through the ``CancelToken``; the run stops between batches of jobs and its outcome is still delivered to
``on_done`` (which stores it), so nothing of a disconnected answer is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from minions.backends.base import Backend
from minions.backends.registry import default_local, default_remote, providers, resolve
from minions.documents import Document
from minions.errors import MinionsError, UnknownProviderError
from minions.events import CancelToken, Event, JobToken, Notice, emit
from minions.protocols import (
    PROTOCOLS,
    AnswerMode,
    Budget,
    RunOptions,
    RunResult,
    default_protocol,
    get_protocol,
    needs_remote,
    remote_leaves_device,
)
from minions.protocols.library import Sources
from minions.protocols.search.sent import with_egress

__all__ = ["Models", "Outcome", "RunRequest", "Runner", "Settings"]

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0
"""Seconds of silence after which a stream gets a keep-alive, so proxies and clients do not give up."""

OutcomeStatus = Literal["ok", "partial", "cancelled", "error"]


class Settings(BaseModel):
    """What the user chose in the settings panel (and what ``PUT /api/settings`` accepts)."""

    model_config = ConfigDict(extra="forbid")

    local: str = Field(min_length=1, max_length=500)
    remote: str | None = Field(default=None, max_length=500)
    """None: only the ``local`` protocol runs, and nothing leaves the device."""
    protocol: str
    """By default ``minions`` with a remote model, ``local`` without one (``Models.default_settings``)."""
    budget_tokens: int | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)
    redact: bool = False
    max_rounds: int = Field(default=RunOptions.max_rounds, ge=1, le=10)
    answer: AnswerMode = RunOptions.answer
    """``local``: whether the local model writes its answer from its quotes (``RunOptions.answer``)."""

    @field_validator("remote", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value not in PROTOCOLS:
            raise ValueError(f"unknown protocol {value!r}: use one of {', '.join(PROTOCOLS)}")
        return value

    def can_run(self, protocol: str) -> bool:
        """Whether ``protocol`` runs with these models: all but ``local`` need a remote one."""
        return self.remote is not None or not needs_remote(protocol)

    def options(self) -> dict[str, Any]:
        """Keyword options for ``get_protocol``."""
        opts: dict[str, Any] = {"max_rounds": self.max_rounds, "redact": self.redact, "answer": self.answer}
        if self.budget_tokens is not None or self.budget_usd is not None:
            opts["budget"] = Budget(max_remote_tokens=self.budget_tokens, max_remote_usd=self.budget_usd)
        return opts


class Models:
    """Backends by ``provider/model``, built once (loading a local model takes seconds) and reused.

    ``local``/``remote`` are the defaults of the settings: specs, or backends (tests pass scripted ones), which
    then answer to their own names before the registry is asked.
    """

    def __init__(self, local: Backend | str | None = None, remote: Backend | str | None = None) -> None:
        self.injected: dict[str, Backend] = {
            b.name: b for b in (local, remote) if b is not None and not isinstance(b, str)
        }
        self.default_local = _spec(local) or default_local()
        self.default_remote = _spec(remote) or default_remote()
        self._built: dict[str, Backend] = {}
        self._lock = threading.Lock()

    def check(self, spec: str) -> None:
        """Raise UnknownProviderError now, at settings time, for a spec no provider can resolve."""
        if spec in self.injected:
            return
        provider = spec.strip().partition("/")[0]
        table = providers()
        if provider not in table:
            raise UnknownProviderError(
                f"Unknown provider {provider!r} in {spec!r}: use one of {', '.join(sorted(table))} as provider/model."
            )

    def get(self, spec: str) -> Backend:
        with self._lock:
            if spec in self.injected:
                return self.injected[spec]
            if spec not in self._built:
                self._built[spec] = resolve(spec)
            return self._built[spec]

    def default_settings(self) -> Settings:
        has_remote = self.default_remote is not None
        return Settings(local=self.default_local, remote=self.default_remote, protocol=default_protocol(has_remote))


def _spec(model: Backend | str | None) -> str | None:
    return model if isinstance(model, str) or model is None else model.name


@dataclass(frozen=True)
class RunRequest:
    question: str
    documents: Callable[[], list[Document] | Sources]
    """Called in the worker: loading PDFs blocks, and a failure to load becomes the run's error. ``Sources``: the
    library's search led to these documents and ranked their chunks (``AppDocuments.search``)."""
    settings: Settings


@dataclass(frozen=True)
class Outcome:
    """How a run ended. ``stored`` is what ``on_done`` made of it (the app's saved message)."""

    status: OutcomeStatus
    answer: str
    settings: Settings
    result: RunResult | None = None
    error: str | None = None
    documents: tuple[str, ...] = ()
    remote_leaves_device: bool = False
    exception: BaseException | None = field(default=None, compare=False)
    """The error that ended the run before it produced a result, for callers that map it (to an HTTP status)."""
    stored: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def text(self) -> str:
        """What the conversation shows: the answer, else why there is none."""
        if self.answer:
            return self.answer
        if self.error:
            return self.error
        notes = self.result.notes if self.result else ()
        return "No answer: " + (notes[0] if notes else "the run produced none.")

    def meta(self) -> dict[str, Any]:
        result = self.result.to_dict() if self.result else None
        if result is not None:  # the local model's raw replies are debugging noise in a saved conversation
            for job in result["jobs"]:
                job.pop("raw", None)
        return {
            "protocol": self.settings.protocol,
            "local": self.settings.local,
            "remote": self.settings.remote,
            "remote_leaves_device": self.remote_leaves_device,
            "documents": list(self.documents),
            "error": self.error,
            "result": result,
        }


class Runner:
    def __init__(self, models: Models) -> None:
        self.models = models
        self._one_at_a_time = threading.Lock()

    def run(
        self, request: RunRequest, events: Callable[[Event], None] | None = None, cancel: CancelToken | None = None
    ) -> Outcome:
        """Run to the end in this thread; every failure becomes an ``error`` outcome, never an exception."""
        cancel = cancel or CancelToken()
        if not self._one_at_a_time.acquire(blocking=False):
            emit(events, Notice("Waiting for the question in progress to finish.", "info"))
            self._one_at_a_time.acquire()
        s = request.settings
        try:
            if cancel.cancelled:
                return Outcome("cancelled", "", s, error="Cancelled before it started.")
            found = request.documents()
            sources = found if isinstance(found, Sources) else Sources(found)
            docs = sources.documents
            local = self.models.get(s.local)
            remote = self.models.get(s.remote) if s.remote else None
            protocol = get_protocol(s.protocol, local, remote, **s.options())
            result = protocol.run(request.question, docs, events=events, cancel=cancel, ranking=sources.ranking)
            result = with_egress(result, sources.egress)  # the question, to an embedding model elsewhere
        except MinionsError as exc:
            return Outcome("error", "", s, error=str(exc), exception=exc)
        except Exception as exc:  # the app's top level for a run: log it, tell the user, keep serving
            log.exception("run failed")
            message = f"Internal error ({type(exc).__name__}: {exc}); see the server log."
            return Outcome("error", "", s, error=message, exception=exc)
        finally:
            self._one_at_a_time.release()
        leaves = remote is not None and remote_leaves_device(remote)
        status: OutcomeStatus = "ok" if result.complete else "cancelled" if cancel.cancelled else "partial"
        if not result.answer.strip() and status == "partial":
            status = "error"
        return Outcome(
            status, result.answer.strip(), s, result, documents=tuple(d.name for d in docs), remote_leaves_device=leaves
        )

    async def stream(
        self,
        request: RunRequest,
        *,
        on_done: Callable[[Outcome], Mapping[str, Any] | None] | None = None,
        keepalive_s: float = KEEPALIVE_S,
    ) -> AsyncGenerator[Event | Outcome | None, None]:
        """Run in a worker thread; yield its events, then its ``Outcome`` (``None`` now and then: keep-alive).

        Leaving the iteration early (the client disconnected) cancels the run; ``on_done`` still runs, in the
        worker, with the outcome.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | Outcome] = asyncio.Queue()
        cancel = CancelToken()

        def push(item: Event | Outcome) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is listening any more
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def sink(event: Event) -> None:
            if not isinstance(event, JobToken):  # a job's tokens are too chatty for a progress view (not the answer's)
                push(event)

        def work() -> None:
            outcome = self.run(request, sink, cancel)
            if on_done is not None:
                try:
                    outcome = replace(outcome, stored=on_done(outcome))
                except Exception:  # storing failed: still tell the client what the answer was
                    log.exception("could not store the outcome of a run")
            push(outcome)

        threading.Thread(target=work, name="minions-run", daemon=True).start()
        finished = False
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), keepalive_s)
                except TimeoutError:
                    yield None
                    continue
                yield item
                if isinstance(item, Outcome):
                    finished = True
                    return
        finally:
            if not finished:
                log.info("client left before the run finished: cancelling it")
                cancel.cancel()
