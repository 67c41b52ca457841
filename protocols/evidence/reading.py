"""How the local model reads documents it cannot read whole: rank the chunks, read the best, keep the evidence.

    rank      BM25 over the question, with the figure prior (``protocols.search.ranking.lexical_rank``), fused with
              meaning where an embedding model is to hand (``rank``: as a library ranks its own)
    read      evidence-first jobs (``protocols.evidence.jobs``) over the best ``read_chunks``: each picks the sentence
    of
              its chunk that answers (named by its line's label where the local model reports
              log-probabilities, else chosen through a schema); where the backend says what a prompt costs,
              the chunks past ``read_tokens`` new prompt tokens are quoted by words instead (``within_budget``)
    evidence  what is passed on, in rank order: each chunk's quote (or the chunk, where a job found nothing)

The chunks keep their order by words: on FinanceBench, re-ordering them by the local model's scores (yes/no, as
jobs then scored sentences) made recall at 1 and 5 worse (0.19 to 0.07 and 0.41 to 0.33 on 29 questions,
``minions bench evidence``), so the model picks sentences within a chunk and leaves the ranking alone.

``RunContext.reading`` counts it: how many chunks there were, how many the model read and passed on, how many
it skipped and why, and the head of the ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol, runtime_checkable

from minions.chunking import Chunk
from minions.types import ChatRequest, SamplingParams

from ..context import RunContext
from ..result import Evidence, JobRecord
from ..search.meaning import rank_loaded
from ..search.ranking import Ranked, lexical_rank
from .citations import Finding
from .jobs import Job, job_request, run_jobs, scores_sentences

__all__ = [
    "BY_WORDS",
    "RANKED_SHOWN",
    "PromptCounter",
    "Reading",
    "by_words",
    "chunk_evidence",
    "evidence",
    "finding_evidence",
    "rank",
    "read",
    "within_budget",
]

BY_WORDS = "quoted by words: past the prompt tokens the local model may compute for a question (read_tokens)"
"""A job record's explanation where the model did not read the chunk (``by_words``)."""
RANKED_SHOWN = 20
"""The head of the ranking kept in ``RunContext.reading["ranked"]`` (document, chunk index), best first."""


class Reading:
    """The outcome of ``read``: the chunks in their final order, the jobs that read them, best first."""

    def __init__(self, ranked: list[Ranked], jobs: list[Job], records: list[JobRecord]) -> None:
        self.ranked = ranked
        self.jobs = jobs
        self.records = records

    def passed_on(self, k: int) -> list[tuple[Ranked, Job]]:
        """The best ``k`` chunks that a job read, with their job (the jobs read the head of the ranking, in order)."""
        return list(zip(self.ranked, self.jobs, strict=False))[:k]


def read(ctx: RunContext, chunks: Sequence[Chunk], question: str, *, query: str | None = None) -> Reading:
    """Rank ``chunks`` for ``question`` (BM25 over ``query``, default the question; ``ctx.ranking`` instead when
    the run was given one) and run the evidence jobs over the best ``read_chunks``."""
    total = len(chunks)
    if ctx.ranking is not None:
        ranked, total = list(ctx.ranking.ranked), ctx.ranking.chunks
    else:
        ranked = rank(ctx, chunks, question, query=query)
    n = min(ctx.options.read_chunks, len(ranked))
    jobs = [Job(ctx.next_job_id + i, 1, question, r.chunk, knowledge=ctx.knowledge) for i, r in enumerate(ranked[:n])]
    by_model = within_budget(ctx, jobs)
    read_records = iter(run_jobs(ctx, [j for j, model in zip(jobs, by_model, strict=True) if model]))
    records = [next(read_records) if model else by_words(job) for job, model in zip(jobs, by_model, strict=True)]
    ctx.jobs.extend(r for r, model in zip(records, by_model, strict=True) if not model)
    ctx.jobs.sort(key=lambda r: r.job_id)
    ranked = [replace(r, model=rec.score) for r, rec in zip(ranked, records, strict=False)] + ranked[len(records) :]
    _count(ctx, total, n, ranked, scored=scores_sentences(ctx), by_words=by_model.count(False))
    return Reading(ranked, jobs, records)


def rank(ctx: RunContext, chunks: Sequence[Chunk], question: str, *, query: str | None = None) -> list[Ranked]:
    """``chunks`` ranked for ``question`` as a library ranks its own: by words (BM25 over ``query``, default the
    question, with what the documents' profile adds: ``lexical_rank``) and, where they outnumber what is read and an
    embedding model is to hand (``RunContext.embedder``), by meaning too (``meaning.rank_loaded``)."""
    with ctx.timed("rank"):
        ranked = lexical_rank(chunks, query or question, question=question, knowledge=ctx.knowledge)
        if len(chunks) <= ctx.options.read_chunks:
            return ranked  # every chunk is read: the order by words is enough
        if ctx.embedder is None:
            ctx.reading["meaning"] = "off"
            return ranked
        ranked = rank_loaded(chunks, ranked, question, ctx.embedder)
        ctx.reading["meaning"] = ctx.embedder.name
        return ranked


@runtime_checkable
class PromptCounter(Protocol):
    """A backend that says what each prompt would cost it now (``LlamaCppBackend``: saved chunk states are free; a
    server, ``AskingBackend`` or a fleet: the whole prompt, counted)."""

    def prompt_tokens(self, requests: Sequence[ChatRequest]) -> list[int]: ...


def within_budget(ctx: RunContext, jobs: Sequence[Job]) -> list[bool]:
    """Which of ``jobs`` (best first) the local model reads: the first, then each whose prompt still fits in
    ``RunOptions.read_tokens`` after those before it; all where there is no limit, where the backend cannot say
    what a prompt costs, or where it runs on another machine (a server past this device computes on its own)."""
    budget = ctx.options.read_tokens
    local = ctx.local
    if budget is None or not jobs or not isinstance(local, PromptCounter) or not local.capabilities.local:
        return [True] * len(jobs)
    costs = local.prompt_tokens([job_request(j.instruction, j.chunk, SamplingParams()) for j in jobs])
    chosen, spent = [], 0
    for i, cost in enumerate(costs):
        read = i == 0 or spent + cost <= budget
        spent += cost if read else 0
        chosen.append(read)
    return chosen


def by_words(job: Job) -> JobRecord:
    """A job the model did not read: its chunk's best sentence by words (``quotes.candidates``), quoted."""
    best = job.options[0].text if job.options else None
    c = job.chunk
    return JobRecord(job.job_id, job.round, job.instruction, c.document, c.index, tuple(c.pages), attempts=0,
                     ok=best is not None, answer=best, citation=best, explanation=BY_WORDS)  # fmt: skip


def _count(ctx: RunContext, chunks: int, read: int, ranked: Sequence[Ranked], *, scored: bool, by_words: int) -> None:
    how = "named by the local model (its line's label)" if scored else "chosen by the local model through a schema"
    budget = (
        f"; {by_words} of them past the {ctx.options.read_tokens} prompt tokens the model may compute are quoted "
        "by words (their best sentence by words)"
        if by_words
        else ""
    )
    ctx.reading.update(
        chunks=ctx.reading.get("chunks", 0) + chunks,
        read=ctx.reading.get("read", 0) + read,
        by_words=ctx.reading.get("by_words", 0) + by_words,
        skipped=ctx.reading.get("skipped", 0) + chunks - read,
        why=f"chunks ranked by BM25 below the best {read} are not read{budget}; in each chunk the model reads a "
        f"sentence is {how}",
        ranked=[[r.chunk.document, r.chunk.index] for r in ranked[:RANKED_SHOWN]],
    )


def chunk_evidence(chunk: Chunk, *, kind: str = "chunk", score: float | None = None) -> Evidence:
    return Evidence(chunk.document, chunk.text, chunk.start, chunk.end, tuple(chunk.pages), kind, score)


def finding_evidence(finding: Finding | None, chunk: Chunk, score: float | None = None) -> Evidence:
    """What is shown of a job over ``chunk``: its quote, with its place, when it found one; else the chunk."""
    c = finding.citation if finding is not None else None
    if c is None:
        return chunk_evidence(chunk, score=score)
    return Evidence(c.document, c.text, c.start, c.end, c.pages, "quote", score)


def evidence(passed: Sequence[tuple[Ranked, Job]], findings: Sequence[Finding]) -> list[Evidence]:
    """What is passed on, best first: each chunk's quote when its job found one, else the chunk."""
    by_job = {f.job_id: f for f in findings}
    return [finding_evidence(by_job.get(job.job_id), r.chunk, r.score) for r, job in passed]
