"""The state of one run: what every step reads and writes, and how it becomes a ``RunResult``."""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from minions.backends.base import Backend, declared_capabilities
from minions.backends.embeddings import EMBEDDINGS_ENV, Embedder, resolve_embedder
from minions.documents import Document
from minions.errors import MinionsError
from minions.events import CancelToken, EventSink, Notice, emit
from minions.tokens import count_tokens
from minions.types import Usage

from .channel import LocalEgress, Meter, RemoteChannel
from .choices import Choices
from .options import RunOptions
from .result import Citation, EgressLog, Evidence, JobRecord, RoundRecord, RunResult
from .search.profiles import Knowledge, describe, knowledge_of
from .search.ranking import Ranking

__all__ = ["RunCancelled", "RunContext", "remote_only_estimate"]

log = logging.getLogger(__name__)


@functools.cache
def _embedder(spec: str) -> Embedder | None:
    return resolve_embedder(spec)


class RunCancelled(MinionsError):
    """Raised inside a run when its ``CancelToken`` is set; the run returns what it has."""


@dataclass
class RunContext:
    protocol: str
    task: str
    documents: list[Document]
    options: RunOptions
    local: Backend
    remote: RemoteChannel
    meter: Meter
    egress: EgressLog
    events: EventSink | None = None
    cancel: CancelToken | None = None
    jobs: list[JobRecord] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    reading: dict[str, Any] = field(default_factory=dict)
    """What the local model read: chunks, scored, read, skipped, why, and what weighed its sentences ("words", or the
    embedding model's name) (``protocols.evidence.reading``)."""
    ranking: Ranking | None = None
    """The chunks ranked ahead of the run, by a library's index (``protocols.library``); None: the run ranks the
    documents' chunks itself."""
    choices: Choices | None = None
    """The answers the question allows, where it allows a closed set (``protocols.choices``); None: an open one."""
    question: str = ""
    """The question alone, where ``task`` lists its options; empty: the task is the question."""
    choices_given: bool = False
    """Whether the caller gave ``choices`` (a benchmark's loader, ``run(choices=...)``), not read off the question."""
    round_log: list[RoundRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    best_answer: str = ""
    complete: bool = True
    error: str | None = None

    def __post_init__(self) -> None:
        # Every local call goes through ctx.local: a local model on another machine is recorded there, once.
        if not declared_capabilities(self.local).local:
            self.local = LocalEgress(self.local, self.egress, lambda: self.rounds, self.meter, self.options.price_table)

    @functools.cached_property
    def embedder(self) -> Embedder | None:
        """The model that ranks the documents' chunks by meaning where no library ranked them
        (``RunOptions.embeddings``; None: words alone), loaded once a process."""
        return _embedder(self.options.embeddings or os.environ.get(EMBEDDINGS_ENV) or "auto")

    @functools.cached_property
    def knowledge(self) -> Knowledge:
        """What the run's documents add to the core of search (``search.profiles``): their languages, and the
        filings profile where they are filings."""
        return knowledge_of(describe(d) for d in self.documents)

    @property
    def next_job_id(self) -> int:
        return len(self.jobs)

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.cancelled

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise RunCancelled("Cancelled: the run stopped before all local jobs ran; finished jobs are kept.")

    def notice(self, message: str, level: str = "warning") -> None:
        log.log(logging.WARNING if level == "warning" else logging.INFO, "%s: %s", self.protocol, message)
        emit(self.events, Notice(message, level))

    def stop(self, reason: str) -> None:
        """End the run early: keep what it has, say why."""
        self.complete = False
        self.notes.append(reason)
        self.notice(reason)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            key = f"{name}_s"
            self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - start

    def result(self, estimate: Usage | None) -> RunResult:
        return RunResult(
            answer=self.best_answer,
            protocol=self.protocol,
            citations=tuple(self.citations),
            rounds=self.rounds,
            jobs=tuple(self.jobs),
            usage=self.meter.snapshot(),
            remote_only_estimate=estimate,
            timings=dict(self.timings),
            egress=self.egress.records,
            complete=self.complete,
            error=self.error,
            notes=tuple(self.notes),
            round_log=tuple(self.round_log),
            evidence=tuple(self.evidence),
            reading=dict(self.reading),
        )


def remote_only_estimate(task: str, documents: list[Document], remote: Backend, options: RunOptions) -> Usage:
    """What one call with the whole documents and the task would cost the remote model (counted, not sent)."""
    text = "\n\n".join([task, *(d.text for d in documents)])
    usage = Usage(prompt_tokens=count_tokens(text, remote.name), calls=1)
    return Usage(usage.prompt_tokens, calls=1, cost_usd=options.price_table.cost(remote.name, usage))
