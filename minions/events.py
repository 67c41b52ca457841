"""A typed stream of progress events. Protocols emit them; the CLI and the app render them.

A sink is any callable taking an ``Event``. Sinks must be cheap and must not raise: ``emit`` logs and
swallows a sink's exception so a broken progress bar never breaks a run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

__all__ = [
    "SETUP_LOG",
    "AnswerToken",
    "CancelToken",
    "Event",
    "EventSink",
    "FinalAnswer",
    "JobFailed",
    "JobFinished",
    "JobStarted",
    "JobToken",
    "Notice",
    "PlanReady",
    "RoundDone",
    "emit",
]

log = logging.getLogger(__name__)

SETUP_LOG = "minions.setup"
"""The logger of one-time set-up work that a user waits for (a model converted on first use): one INFO line each,
which the CLI shows on stderr where it hides other log lines."""


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class PlanReady(Event):
    kind: ClassVar[str] = "plan_ready"
    round: int
    jobs: int
    instructions: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobStarted(Event):
    kind: ClassVar[str] = "job_started"
    job_id: int
    round: int
    label: str


@dataclass(frozen=True)
class JobToken(Event):
    kind: ClassVar[str] = "job_token"
    job_id: int
    text: str


@dataclass(frozen=True)
class JobFinished(Event):
    kind: ClassVar[str] = "job_finished"
    job_id: int
    round: int
    label: str
    answer: str | None = None


@dataclass(frozen=True)
class JobFailed(Event):
    kind: ClassVar[str] = "job_failed"
    job_id: int
    round: int
    label: str
    error: str
    will_retry: bool = False


@dataclass(frozen=True)
class RoundDone(Event):
    kind: ClassVar[str] = "round_done"
    round: int
    jobs_ok: int
    jobs_failed: int
    decision: str = ""


@dataclass(frozen=True)
class Notice(Event):
    """Something the user should know (a truncation, a budget stop, a fallback)."""

    kind: ClassVar[str] = "notice"
    message: str
    level: str = "warning"


@dataclass(frozen=True)
class AnswerToken(Event):
    """A piece of an answer the local model is writing, as it comes; the final answer may still replace it (a
    written answer that states what its quotes do not: ``protocols.evidence.written``)."""

    kind: ClassVar[str] = "answer_token"
    text: str


@dataclass(frozen=True)
class FinalAnswer(Event):
    kind: ClassVar[str] = "final"
    answer: str
    extra: dict[str, Any] = field(default_factory=dict)


EventSink = Callable[[Event], None]


def emit(sink: EventSink | None, event: Event) -> None:
    if sink is None:
        return
    try:
        sink(event)
    except Exception:  # a renderer's bug must not break the run it renders
        log.exception("event sink failed on %s", event.kind)


class CancelToken:
    """Set from any thread to stop a run; long loops check ``cancelled`` between steps."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()
