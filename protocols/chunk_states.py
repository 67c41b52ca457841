"""Reading documents ahead of questions: every chunk's "system prompt + chunk" computed once and saved, so a
question later computes only itself (``backends.llamacpp.prefixes``).

The chunks are cut as the local reading cuts them (``RunOptions``: ``chunk_by``, ``chunk_size``, ``overlap``) and
the prefixes are built by the jobs' own ``job_request``, so what is saved is what the jobs restore. Only a
backend that keeps prompt prefixes (the embedded llama.cpp model) can save them; any other raises ``ConfigError``.
This builds no index (the library's text index is ``protocols.search.index``): it computes chunk states ahead.

The library (``protocols.library``) saves a chunk's state when a question reads it; this computes them all
ahead, for ``minions index --warm`` and ``Library.warm``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from minions.backends.base import Backend
from minions.backends.registry import default_local, resolve
from minions.chunking import Chunk, chunk_documents
from minions.documents import Document
from minions.errors import ConfigError
from minions.events import CancelToken
from minions.types import ChatRequest, SamplingParams

from .evidence.jobs import job_request
from .options import RunOptions

__all__ = ["ChunkStateProgress", "PrefixSaver", "chunk_state_requests", "save_chunk_states"]

PLACEHOLDER = "?"
"""The question of a chunk-state request: the saved prefix ends before the question, so any question will do."""


@runtime_checkable
class PrefixSaver(Protocol):
    """A backend that computes and keeps marked prompt prefixes (``LlamaCppBackend``)."""

    def save_prefixes(
        self,
        requests: Sequence[ChatRequest],
        *,
        on_progress: Callable[[Any], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class ChunkStateProgress:
    """Where computing the chunk states stands: after each chunk, and once more at the end of each document
    (``finished``)."""

    document: str
    pages: int
    """Pages of the document whose chunks are done (all of them, for a document without pages: 0)."""
    pages_total: int
    chunks: int
    chunks_total: int
    tokens: int
    """Prompt tokens computed so far in this document (chunks saved before cost none)."""
    tokens_per_s: float
    eta_s: float | None
    """Seconds left for this document at the pace so far; None before the first computed chunk."""
    finished: bool = False


def chunk_state_requests(chunks: Sequence[Chunk]) -> list[ChatRequest]:
    """One request per chunk, as the local jobs build them: what is computed here is what they restore."""
    return [job_request(PLACEHOLDER, chunk, SamplingParams(max_tokens=1)) for chunk in chunks]


def save_chunk_states(
    documents: Sequence[Document],
    local: Backend | str | None = None,
    *,
    options: RunOptions | None = None,
    on_progress: Callable[[ChunkStateProgress], None] | None = None,
    cancel: CancelToken | None = None,
    step: int | None = None,
) -> list[ChunkStateProgress]:
    """Compute and save every chunk prefix of ``documents`` that is not saved yet; one final ``ChunkStateProgress``
    per document. ``step``: chunks per call to the backend (between calls, questions get the model: the app
    reads ahead in steps of a few chunks); None: a document per call."""
    backend = resolve(local or default_local()) if not isinstance(local, Backend) else local
    if not isinstance(backend, PrefixSaver):
        raise ConfigError(
            f"{backend.name} keeps no prompt prefixes: saving chunk states needs the embedded model "
            "(--local llamacpp/default or a llamacpp/<file.gguf>)."
        )
    o = options or RunOptions()
    done = []
    for doc in documents:
        chunks = chunk_documents([doc], by=o.chunk_by, size=o.chunk_size, overlap=o.overlap)
        done.append(_save_one(backend, doc, chunks, on_progress, cancel, step or len(chunks) or 1))
    return done


def _save_one(
    backend: PrefixSaver,
    doc: Document,
    chunks: Sequence[Chunk],
    on_progress: Callable[[ChunkStateProgress], None] | None,
    cancel: CancelToken | None,
    step: int,
) -> ChunkStateProgress:
    pages_total = len(doc.pages)
    start = time.perf_counter()
    state = ChunkStateProgress(doc.name, 0, pages_total, 0, len(chunks), 0, 0.0, None)
    base_done = base_tokens = 0  # of the calls before this one

    def report(stats: Any) -> None:
        nonlocal state
        n, tokens = base_done + int(stats.done), base_tokens + int(stats.computed_tokens)
        pages = max((max(c.pages, default=0) for c in chunks[:n]), default=0)
        elapsed = time.perf_counter() - start
        rate = tokens / elapsed if elapsed > 0 else 0.0
        eta = elapsed / n * (len(chunks) - n) if n and tokens else None
        state = ChunkStateProgress(doc.name, pages, pages_total, n, len(chunks), tokens, rate, eta)
        if on_progress is not None:
            on_progress(state)

    for first in range(0, len(chunks), step):
        if cancel is not None and cancel.cancelled:
            return state
        part = chunks[first : first + step]
        stats = backend.save_prefixes(chunk_state_requests(part), on_progress=report, cancel=cancel)
        base_done, base_tokens = base_done + len(part), base_tokens + int(stats.computed_tokens)
    final = ChunkStateProgress(
        doc.name, pages_total, pages_total, len(chunks), len(chunks), state.tokens, state.tokens_per_s, 0.0, True
    )
    if on_progress is not None:
        on_progress(final)
    return final
