"""What every protocol shares: resolving backends, checking inputs, the run context, and turning a run that
stops early (budget, cancellation, a failing model) into a partial ``RunResult`` that says why."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from minions.backends.base import Backend
from minions.backends.registry import resolve
from minions.chunking import Chunk
from minions.documents import Document, load_document
from minions.errors import (
    BackendError,
    BudgetExceededError,
    ConfigError,
    DocumentNotFoundError,
    EmptyDocumentError,
    ModelOutputError,
)
from minions.events import CancelToken, EventSink, FinalAnswer, emit
from minions.unicode import replaced_note, valid_text

from .channel import Meter, RemoteChannel
from .choices import Choices, as_choices, closed_form
from .context import RunCancelled, RunContext, remote_only_estimate
from .evidence.citations import locate, verify_citation
from .options import InputError, RunOptions, missing_remote, needs_remote
from .redact import Redactor
from .result import Citation, EgressLog, RunResult
from .search.ranking import Ranking

__all__ = [
    "BaseProtocol",
    "DocumentsLike",
    "as_documents",
    "check_task",
    "describe_documents",
    "fit_to_tokens",
    "to_json",
    "verified_citations",
]

log = logging.getLogger(__name__)

MAX_LISTED = 30
"""Longest list (of section titles, pages, ...) a document description shows the remote model."""


# What a caller passes to ``run``, checked and normalised: a task and documents.

DocumentLike = Document | str | os.PathLike[str]
DocumentsLike = DocumentLike | Sequence[DocumentLike]


def check_task(task: str) -> str:
    if not isinstance(task, str) or not task.strip():
        raise InputError("The task is empty: say what you want to know about the documents.")
    return task.strip()


def _one(item: DocumentLike) -> Document:
    if isinstance(item, Document):
        doc = item
    elif isinstance(item, str) and not Path(item).exists():
        raise DocumentNotFoundError(
            f"No file named {item[:60]!r}: pass a path, a Document, or Document.from_text(text, name=...) "
            "to use a string of text.",
            path=item[:200],
        )
    elif isinstance(item, str | os.PathLike):
        doc = load_document(item)
    else:
        raise InputError(f"Cannot use {type(item).__name__} as a document: pass a Document or a path.")
    if not doc.text.strip():
        raise EmptyDocumentError(f"Document {doc.name!r} has no text to read.", path=str(doc.path or doc.name))
    return doc


def as_documents(documents: DocumentsLike) -> list[Document]:
    """Documents from Documents and paths (one or many); names are made unique so citations stay clear."""
    items = [documents] if isinstance(documents, Document | str | os.PathLike) else list(documents)
    if not items:
        raise InputError("No documents: pass at least one Document or path.")
    docs = [_one(item) for item in items]
    names = [d.name for d in docs]
    if len(set(names)) != len(names):
        raise InputError(f"Two documents share a name ({', '.join(sorted(names))}): give each a unique name.")
    return docs


class BaseProtocol:
    """``Protocol(local, remote, **options).run(task, documents) -> RunResult``.

    ``local`` and ``remote`` are backends or ``"provider/model"`` strings. Only ``local`` runs without a
    remote model (and then nothing leaves the device, unless the local model itself is on another machine); the
    others raise ``ConfigError``, since a local model cast as the planner fails. ``options`` are the fields of
    ``RunOptions``.
    """

    name: ClassVar[str] = "base"

    def __init__(
        self,
        local: Backend | str,
        remote: Backend | str | None = None,
        *,
        events: EventSink | None = None,
        cancel: CancelToken | None = None,
        **options: Any,
    ) -> None:
        self.options = RunOptions.from_kwargs(options)
        if remote is None and needs_remote(self.name):
            raise ConfigError(missing_remote(self.name))
        self.local = resolve(local)
        self.remote = resolve(remote) if remote is not None else self.local  # LocalOnly: it never asks it
        self.events = events
        self.cancel = cancel

    def run(
        self,
        task: str,
        documents: DocumentsLike,
        *,
        events: EventSink | None = None,
        cancel: CancelToken | None = None,
        ranking: Ranking | None = None,
        choices: Choices | Sequence[str] | None = None,
    ) -> RunResult:
        """``ranking``: the documents' chunks ranked ahead (a library's search), for the protocols that rank chunks
        by words (``local``, ``rag``); the others read ``documents`` as they would. ``choices``: the answers the
        question allows (its options, or "yes"/"no"/"maybe"), which the protocols read listed after it
        (``Choices.ask``); none given, a closed form is read from the question (``choices.closed_form``)."""
        task, replaced = valid_text(check_task(task))
        docs = as_documents(documents)
        question, form = _form(task, choices)
        asked = form.ask(task) if choices is not None and form is not None else task
        ctx = self._context(asked, docs, events or self.events, cancel or self.cancel)
        ctx.question, ctx.choices, ctx.choices_given = question, form, choices is not None
        ctx.ranking = ranking
        if ranking is not None and ranking.about:
            ctx.reading["library"] = dict(ranking.about)
        _note_replaced(ctx, replaced, docs)
        estimate = remote_only_estimate(task, docs, self.remote, self.options)
        try:
            with ctx.timed("total"):
                self._run(ctx)
        except (BudgetExceededError, RunCancelled) as exc:
            ctx.stop(str(exc))
        except (BackendError, ModelOutputError) as exc:  # a model that fails or writes nonsense: keep what the run has
            ctx.error = str(exc)
            ctx.stop(f"{type(exc).__name__}: {exc}")
        _report_failed_jobs(ctx)
        emit(ctx.events, FinalAnswer(ctx.best_answer, {"complete": ctx.complete, "protocol": self.name}))
        return ctx.result(estimate)

    def _context(
        self, task: str, docs: list[Document], events: EventSink | None, cancel: CancelToken | None
    ) -> RunContext:
        meter, egress, o = Meter(), EgressLog(), self.options
        channel = RemoteChannel(
            self.remote,
            meter=meter,
            egress=egress,
            prices=o.price_table,
            budget=o.budget,
            redactor=Redactor() if o.redact else None,
            max_retries=o.max_retries,
            max_tokens=o.remote_max_tokens,
        )
        return RunContext(self.name, task, docs, o, self.local, channel, meter, egress, events, cancel)

    def _run(self, ctx: RunContext) -> None:
        raise NotImplementedError


def _form(task: str, choices: Choices | Sequence[str] | None) -> tuple[str, Choices | None]:
    """The question and the answers it allows: ``choices`` as given, else those ``closed_form`` reads in it."""
    if choices is not None:
        if isinstance(choices, str):
            raise InputError("choices is a list of options (or Choices), not one string.")
        return task, as_choices(choices)
    found = closed_form(task)
    return found if found is not None else (task, None)


def _note_replaced(ctx: RunContext, in_task: int, docs: Sequence[Document]) -> None:
    """A note for the question and for each document in which characters that are not valid Unicode were
    replaced (``minions.unicode``): the answer may rest on text that is not quite what was sent."""
    found = [("the question", in_task)] + [(d.name, d.replaced_characters) for d in docs]
    for where, n in found:
        if n:
            ctx.notes.append(replaced_note(n, where))


def _report_failed_jobs(ctx: RunContext) -> None:
    """Jobs the local backend failed (not ones whose reply was unusable) make the run incomplete, with a note that
    says how many and why; when every job failed, the run failed (``error``: the CLI exits non-zero)."""
    failed = [j for j in ctx.jobs if j.failed_in_backend]
    if not failed:
        return
    n, total = len(failed), len(ctx.jobs)
    rest = "; the answer rests on the others" if n < total else ": the local model answered none"
    note = f"{n} of {total} local jobs failed in {ctx.local.name} ({failed[0].error}){rest}."
    ctx.complete = False
    ctx.notes.append(note)
    ctx.notice(note)
    if n == total and ctx.error is None:
        ctx.error = note


def _brief(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _brief(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [_brief(v) for v in value[:MAX_LISTED]]
        return items + ([f"... {len(value) - MAX_LISTED} more"] if len(value) > MAX_LISTED else [])
    return value


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def describe_documents(docs: Sequence[Document]) -> str:
    """What the remote model may know about the documents: names, sizes, pages, section titles; never text."""
    return "\n".join(to_json(_brief(d.describe())) for d in docs)


def fit_to_tokens(text: str, backend: Backend, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` tokens of ``backend`` (and whether it was cut)."""
    n = backend.count_tokens(text)
    if n <= limit:
        return text, False
    while n > limit and text:
        text = text[: int(len(text) * limit / n * 0.97)]
        n = backend.count_tokens(text)
    return text, True


def verified_citations(quotes: Sequence[str], docs: Sequence[Document]) -> list[Citation]:
    """Citations for the quotes found (near-)verbatim in a document; the others are dropped."""
    out = []
    for quote in quotes:
        for d in docs:
            if verify_citation(quote, d.text):
                whole = Chunk(d.name, 0, d.text, 0, len(d.text), tuple(p.number for p in d.pages))
                out.append(locate(quote, whole, d))
                break
    return out
