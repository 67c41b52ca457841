"""What every protocol run returns, and the egress log that records what left the device."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from minions.errors import ModelOutputError
from minions.types import Usage

__all__ = [
    "LOCAL_STEP",
    "Citation",
    "EgressLog",
    "EgressRecord",
    "Evidence",
    "JobRecord",
    "RoundRecord",
    "RunResult",
]


@dataclass(frozen=True)
class Citation:
    """A verbatim quote from a chunk, with where it came from."""

    text: str
    document: str
    chunk: int
    pages: tuple[int, ...] = ()
    start: int | None = None
    end: int | None = None
    line: int | None = None
    """The line where the quote starts, for documents without pages."""

    @property
    def label(self) -> str:
        if len(self.pages) > 1:
            return f"{self.document} p.{self.pages[0]}-{self.pages[-1]}"
        if self.pages:
            return f"{self.document} p.{self.pages[0]}"
        if self.line is not None:
            return f"{self.document} line {self.line}"
        return f"{self.document} #{self.chunk + 1}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "document": self.document,
            "chunk": self.chunk,
            "pages": list(self.pages),
            "start": self.start,
            "end": self.end,
            "line": self.line,
            "label": self.label,
        }


@dataclass(frozen=True)
class Evidence:
    """A passage of a document that a step of the run passed on (to the remote model, or to the local answer
    step), with where it lies. A run's evidence is ranked, best first, so that recall at k can be read."""

    document: str
    text: str
    start: int | None = None
    """Character offsets in the document's text; None where the passage could not be placed."""
    end: int | None = None
    pages: tuple[int, ...] = ()
    kind: str = "chunk"
    """"quote" (a verbatim sentence a job chose), "chunk" (a chunk a job read or retrieval picked), "document"."""
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "text": self.text,
            "start": self.start,
            "end": self.end,
            "pages": list(self.pages),
            "kind": self.kind,
            "score": self.score,
        }


LOCAL_STEP = "local"
"""The step of a prompt sent to a local model that is not on this device; the remote model's steps are others."""
EMBED_STEP = "embed"
"""The step of a question sent to an embedding model that is not on this device (to search by meaning)."""


@dataclass(frozen=True)
class EgressRecord:
    """One piece of text sent to a model that does not run on this device."""

    round: int
    step: str
    backend: str
    text: str
    host: str | None = None
    """Where it went (``host:port``), where the backend has an address."""
    bytes: int | None = None
    """The bytes of text sent (UTF-8), where the request was counted as sent (an embedding's)."""
    tokens: int | None = None
    """The tokens the server counted, where it says."""
    usd: float | None = None
    """Its price, where known."""

    def to_dict(self) -> dict[str, Any]:
        counted = {"bytes": self.bytes, "tokens": self.tokens, "usd": self.usd} if self.bytes is not None else {}
        return {
            "round": self.round,
            "step": self.step,
            "backend": self.backend,
            "host": self.host,
            "text": self.text,
            "chars": len(self.text),
            **counted,
        }


class EgressLog:
    """Append-only, thread-safe record of everything that left the device."""

    def __init__(self) -> None:
        self._records: list[EgressRecord] = []
        self._lock = threading.Lock()

    def record(self, round: int, step: str, backend: str, text: str, host: str | None = None) -> None:
        with self._lock:
            self._records.append(EgressRecord(round, step, backend, text, host))

    @property
    def records(self) -> tuple[EgressRecord, ...]:
        return tuple(self._records)

    @property
    def chars(self) -> int:
        return sum(len(r.text) for r in self._records)

    def __len__(self) -> int:
        return len(self._records)


@dataclass(frozen=True)
class JobRecord:
    """One local job: what it was asked, over which chunk, and what came back (or how it failed)."""

    job_id: int
    round: int
    instruction: str
    document: str
    chunk: int
    pages: tuple[int, ...]
    attempts: int
    ok: bool
    answer: str | None = None
    explanation: str = ""
    citation: str | None = None
    error: str | None = None
    raw: str = ""
    sample: int = 0
    citation_verified: bool | None = None
    """Whether the citation was found (near-)verbatim in the chunk; None when there is none."""
    score: float | None = None
    """The local model's log-odds that its best sentence answers (jobs scored by log-probabilities); else None."""
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """Why the job failed, typed: the backend's own error (a ``BackendError`` when the model could not be run), or
    a ``ModelOutputError`` for a reply that is not a usable answer. ``error`` is its text."""

    @property
    def failed_in_backend(self) -> bool:
        """Whether the job failed before the model could answer (the local model is down, the prompt does not fit),
        rather than by what the model wrote."""
        return self.exception is not None and not isinstance(self.exception, ModelOutputError)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items() if k != "exception"}


@dataclass(frozen=True)
class RoundRecord:
    """One round of a multi-round protocol: what the local model was asked and what the remote decided."""

    round: int
    instructions: tuple[str, ...]
    jobs: int
    jobs_ok: int
    decision: str = ""
    feedback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "instructions": list(self.instructions),
            "jobs": self.jobs,
            "jobs_ok": self.jobs_ok,
            "decision": self.decision,
            "feedback": self.feedback,
        }


@dataclass(frozen=True)
class RunResult:
    answer: str
    protocol: str
    citations: tuple[Citation, ...] = ()
    rounds: int = 0
    jobs: tuple[JobRecord, ...] = ()
    usage: Mapping[str, Usage] = field(default_factory=dict)
    """Usage by role: ``local``, ``remote`` (and ``judge`` in evaluations)."""
    remote_only_estimate: Usage | None = None
    """What sending the whole documents to the remote model would have cost, for the saving."""
    timings: Mapping[str, float] = field(default_factory=dict)
    egress: tuple[EgressRecord, ...] = ()
    complete: bool = True
    """False when the run stopped early (budget, cancellation, a dead backend); ``notes`` says why."""
    error: str | None = None
    """Set when a backend failure (not a budget or a cancellation) stopped the run."""
    notes: tuple[str, ...] = ()
    round_log: tuple[RoundRecord, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    """What reached the remote model (Minions: the findings' quotes, else their chunks; RAG: the retrieved
    chunks; remote: the documents as sent), or for ``local`` what its answer step read; ranked, best first."""
    reading: Mapping[str, Any] = field(default_factory=dict)
    """How many chunks the local model scored, read and skipped, and why (empty where it read none); for ``local``,
    under ``"answer"``, whether the local model wrote the answer and whether it stood
    (``protocols.evidence.written``)."""

    @property
    def total_usage(self) -> Usage:
        return sum(self.usage.values(), Usage())

    @property
    def cost_usd(self) -> float:
        return self.total_usage.cost_usd

    @property
    def saving_usd(self) -> float | None:
        if self.remote_only_estimate is None:
            return None
        return self.remote_only_estimate.cost_usd - self.cost_usd

    @property
    def local_egress(self) -> str | None:
        """What left this device through the local model, when it is on another machine, as the CLI and the app
        say it; None when nothing did."""
        sent = [r for r in self.egress if r.step == LOCAL_STEP]
        if not sent:
            return None
        where = ", ".join(sorted({r.host or r.backend for r in sent}))
        chars = sum(len(r.text) for r in sent)
        prompts = f"{len(sent)} local prompt{'s' if len(sent) != 1 else ''}"
        return f"{prompts} ({chars:,} characters) left this device to {where} (the local model is not on this device)"

    @property
    def embed_egress(self) -> str | None:
        """What left this device to an embedding model on another machine (the question, to search by meaning), as
        the CLI, the app and MCP say it; None when nothing did."""
        sent = [r for r in self.egress if r.step == EMBED_STEP]
        if not sent:
            return None
        where = ", ".join(sorted({r.host or r.backend for r in sent}))
        size, tokens = sum(r.bytes or 0 for r in sent), sum(r.tokens or 0 for r in sent)
        price = sum(r.usd or 0.0 for r in sent)
        cost = f", ${price:.6f}" if price else ""
        return (
            f"the question's embedding ({size:,} bytes, {tokens:,} tokens{cost}) left this device to {where} (the "
            "embedding model is not on this device)"
        )

    @property
    def device_egress(self) -> str | None:
        """What left this device other than the remote model's prompts (through a local model or an embedding model
        on another machine), in a sentence; None when nothing did."""
        return "; ".join(s for s in (self.local_egress, self.embed_egress) if s) or None

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "protocol": self.protocol,
            "complete": self.complete,
            "error": self.error,
            "notes": list(self.notes),
            "citations": [c.to_dict() for c in self.citations],
            "rounds": self.rounds,
            "jobs": [j.to_dict() for j in self.jobs],
            "usage": {role: u.to_dict() for role, u in self.usage.items()},
            "cost_usd": self.cost_usd,
            "remote_only_estimate": self.remote_only_estimate.to_dict() if self.remote_only_estimate else None,
            "saving_usd": self.saving_usd,
            "timings": dict(self.timings),
            "egress": [r.to_dict() for r in self.egress],
            "local_egress": self.local_egress,
            "embed_egress": self.embed_egress,
            "round_log": [r.to_dict() for r in self.round_log],
            "evidence": [e.to_dict() for e in self.evidence],
            "reading": dict(self.reading),
        }
