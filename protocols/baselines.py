"""Baselines with the same interface as Minions, to compare against:

- ``RemoteOnly``: the whole documents go to the remote model (cut to its context window, with a notice);
- ``LocalOnly``: the local model maps the task over every chunk and reduces the answers itself;
- ``RAG``: the chunks that BM25 ranks best for the task go to the remote model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from pydantic import ValidationError

from minions.chunking import Chunk, chunk_documents
from minions.types import Message, SamplingParams

from .aggregate import aggregate, best_answer, digest, locate, verify_citation
from .base import BaseProtocol, fit_to_tokens, to_json, verified_citations
from .channel import priced
from .context import RunContext
from .jobs import Job, run_jobs
from .parsing import extract_json
from .prompts import render
from .result import Citation
from .schemas import Answer, JobSpec
from .scope import bound_jobs, retrieve

__all__ = ["RAG", "LocalOnly", "RemoteOnly"]

log = logging.getLogger(__name__)

PROMPT_RESERVE = 256


def _ask_answer(ctx: RunContext, context: str, step: str) -> Answer:
    messages = [
        Message("system", render("answer_system")),
        Message("user", render("answer", context=context, task=ctx.task)),
    ]
    with ctx.timed("remote"):
        return ctx.remote.ask(messages, Answer, step=step, round=1)


class RemoteOnly(BaseProtocol):
    name: ClassVar[str] = "remote"

    def _run(self, ctx: RunContext) -> None:
        ctx.rounds = 1
        text = "\n\n".join(f"# {d.name}\n{d.text}" for d in ctx.documents)
        remote = ctx.remote.backend
        limit = remote.capabilities.context_window - ctx.options.remote_max_tokens - PROMPT_RESERVE
        context, cut = fit_to_tokens(text, remote, max(limit, 1))
        if cut:
            ctx.notice(
                f"The documents exceed {remote.name}'s context window "
                f"({remote.capabilities.context_window} tokens): it reads the first {len(context)} of "
                f"{len(text)} characters."
            )
        answer = _ask_answer(ctx, context, "answer")
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
        chunks = chunk_documents(ctx.documents, by=o.chunk_by, size=o.chunk_size, overlap=o.overlap)
        top = retrieve(chunks, ctx.task, o.top_k)
        context = "\n\n".join(f"[{c.label}]\n{c.text}" for c in top)
        answer = _ask_answer(ctx, context, "answer")
        ctx.best_answer = ctx.remote.restore(answer.answer)
        ctx.citations = _cite(answer.citations, top, ctx)


def _cite(quotes: Sequence[str], chunks: Sequence[Chunk], ctx: RunContext) -> list[Citation]:
    docs = {d.name: d for d in ctx.documents}
    out = []
    for quote in quotes:
        chunk = next((c for c in chunks if verify_citation(quote, c.text)), None)
        if chunk is not None:
            out.append(locate(quote, chunk, docs.get(chunk.document)))
    return out


class LocalOnly(BaseProtocol):
    name: ClassVar[str] = "local"

    def _run(self, ctx: RunContext) -> None:
        ctx.rounds = 1
        o = ctx.options
        chunks = chunk_documents(ctx.documents, by=o.chunk_by, size=o.chunk_size, overlap=o.overlap)
        spec = JobSpec(instruction=ctx.task)
        bounded, notices = bound_jobs([spec], [list(chunks)], 1, o.max_jobs_per_round)
        for message in notices:
            ctx.notice(message)
        jobs = [Job(i, 1, ctx.task, c) for i, c in enumerate(bounded[0].chunks)]
        run_jobs(ctx, jobs)
        checked, findings = aggregate(ctx.jobs, {j.job_id: j.chunk for j in jobs}, {d.name: d for d in ctx.documents})
        ctx.jobs[:] = checked
        ctx.best_answer = best_answer(findings)
        ctx.citations = [f.citation for f in findings if f.citation is not None][:10]
        if len(findings) > 1:
            self._reduce(ctx, to_json(digest(findings)))

    def _reduce(self, ctx: RunContext, findings: str) -> None:
        """The local model picks one answer from the findings; if it cannot, the majority answer stands."""
        prompt = render("reduce", task=ctx.task, findings=findings)
        limit = ctx.local.capabilities.context_window - ctx.options.job_max_tokens - PROMPT_RESERVE
        prompt, _ = fit_to_tokens(prompt, ctx.local, limit)
        with ctx.timed("local"):
            result = ctx.local.chat([Message("user", prompt)], SamplingParams(max_tokens=ctx.options.job_max_tokens))
        ctx.meter.add("local", priced(ctx.local, result.usage, ctx.options.price_table))
        try:
            ctx.best_answer = Answer.model_validate(extract_json(result.text)).answer
        except (ValueError, ValidationError) as exc:
            log.info("local reduce reply unusable (%s); keeping the majority answer", exc)
