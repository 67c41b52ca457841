"""Baselines with the same interface as Minions, to compare against:

- ``RemoteOnly``: the whole documents go to the remote model (cut to its context window, with a notice);
- ``RAG``: the chunks that BM25 ranks best for the task go to the remote model.

The protocol without a remote model, ``LocalOnly``, is ``protocols.local``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import ClassVar

from minions.chunking import Chunk, chunk_documents
from minions.documents import Document
from minions.errors import ContextLengthError
from minions.tokens import TOKEN_MARGIN
from minions.types import Message

from .base import BaseProtocol, fit_to_tokens, verified_citations
from .context import RunContext
from .evidence.citations import chunk_evidence, locate, verify_citation
from .evidence.reading import rank
from .prompts import render
from .result import Citation, Evidence
from .schemas import Answer
from .search.ranking import Ranked

__all__ = ["RAG", "RemoteOnly"]

log = logging.getLogger(__name__)

PROMPT_RESERVE = 256


def _ask_answer(ctx: RunContext, context: str, step: str) -> Answer:
    messages = [
        Message("system", render("answer_system")),
        Message("user", render("answer", context=context, task=ctx.task)),
    ]
    with ctx.timed("remote"):
        return ctx.remote.ask(messages, Answer, step=step, round=1)


def _context_tokens(ctx: RunContext, window: int) -> int:
    """What the context may take of a ``window`` of tokens: the rest is the reply's room and the prompt's words."""
    return max(window - ctx.options.remote_max_tokens - PROMPT_RESERVE, 1)


def _answer_within(ctx: RunContext, context_for: Callable[[int, int], str]) -> tuple[Answer, str]:
    """The remote model's answer over ``context_for(tokens, window)``, the context cut to the ``tokens`` that the
    remote's ``window`` leaves it, and the context sent. ``context_for`` records what it sends as the run's evidence,
    so that a reply that fails keeps it. A server whose window is smaller than declared (a model on a local server
    declares none: it is taken to be large) says so when the prompt overruns it: the context is cut to that window
    and asked once more, with a notice."""
    window = ctx.remote.capabilities.context_window
    context = context_for(_context_tokens(ctx, window), window)
    try:
        return _ask_answer(ctx, context, "answer"), context
    except ContextLengthError as exc:
        if exc.window is None or exc.window >= window:
            raise
        ctx.notice(f"{ctx.remote.backend.name}'s context window is {exc.window} tokens: it reads less of the text.")
        # the server counts with the model's own tokenizer, which may count more than ours
        context = context_for(int(_context_tokens(ctx, exc.window) / TOKEN_MARGIN), exc.window)
        return _ask_answer(ctx, context, "answer-within-window"), context


class RemoteOnly(BaseProtocol):
    name: ClassVar[str] = "remote"

    def _run(self, ctx: RunContext) -> None:
        ctx.rounds = 1
        text = "\n\n".join(f"# {d.name}\n{d.text}" for d in ctx.documents)
        remote = ctx.remote.backend

        def fitted(tokens: int, window: int) -> str:
            context, cut = fit_to_tokens(text, remote, tokens)
            if cut:
                ctx.notice(
                    f"The documents exceed {remote.name}'s context window ({window} tokens): "
                    f"it reads the first {len(context)} of {len(text)} characters."
                )
            ctx.evidence = [
                Evidence(d.name, d.text[:n], 0, n, tuple(p.number for p in d.pages if p.start < n), "document")
                for d, n in _sent(ctx.documents, len(context))
            ]
            return context

        answer, context = _answer_within(ctx, fitted)
        ctx.best_answer = ctx.remote.restore(answer.answer)
        ctx.citations = [
            c
            for c in verified_citations(answer.citations, ctx.documents)
            if c.text in context or verify_citation(c.text, context)
        ]


class RAG(BaseProtocol):
    name: ClassVar[str] = "rag"

    def _run(self, ctx: RunContext) -> None:
        ctx.rounds = 1
        o = ctx.options
        if ctx.ranking is not None:
            ranked = list(ctx.ranking.ranked[: o.top_k])
        else:
            chunks = chunk_documents(ctx.documents, by=o.chunk_by, size=o.chunk_size, overlap=o.overlap)
            ranked = rank(ctx, chunks, ctx.task)[: o.top_k]
        sent: list[Ranked] = []

        def fitted(tokens: int, window: int) -> str:
            """The best-ranked chunks that fit ``tokens`` (the first cut to them where it alone does not)."""
            sent.clear()
            blocks: list[str] = []
            left = tokens
            for r in ranked:
                block = f"[{r.chunk.label}]\n{r.chunk.text}"
                left -= ctx.remote.backend.count_tokens(block) + 1
                if left < 0 and blocks:
                    break
                sent.append(r)
                blocks.append(block)
            ctx.evidence = [chunk_evidence(r.chunk, score=r.score) for r in sent]
            context = "\n\n".join(blocks)
            return fit_to_tokens(context, ctx.remote.backend, tokens)[0] if left < 0 else context

        answer, _ = _answer_within(ctx, fitted)
        ctx.best_answer = ctx.remote.restore(answer.answer)
        ctx.citations = _cite(answer.citations, [r.chunk for r in sent], ctx)


def _sent(documents: Sequence[Document], chars: int) -> list[tuple[Document, int]]:
    """How much of each document fits in the first ``chars`` characters of their joined text."""
    out = []
    for d in documents:
        chars -= len(f"# {d.name}\n")
        if chars <= 0:
            break
        out.append((d, min(len(d.text), chars)))
        chars -= len(d.text) + 2
    return out


def _cite(quotes: Sequence[str], chunks: Sequence[Chunk], ctx: RunContext) -> list[Citation]:
    docs = {d.name: d for d in ctx.documents}
    out = []
    for quote in quotes:
        chunk = next((c for c in chunks if verify_citation(quote, c.text)), None)
        if chunk is not None:
            out.append(locate(quote, chunk, docs.get(chunk.document)))
    return out
