"""How the local model reads documents it cannot read whole: rank the chunks, read the best, keep the evidence.

    rank      BM25 over the question, with the figure prior (``protocols.ranking.lexical_rank``)
    read      evidence-first jobs (``protocols.jobs``) over the best chunks: with a backend that reports
              log-probabilities, the best ``rerank`` chunks are scored (the chunk and its best sentences, yes or
              no) and re-ranked by the model's score fused with their rank by words; without, the best
              ``read_chunks`` pick a sentence through a schema
    evidence  what is passed on, best first: the best ``read_chunks`` chunks' quotes (or the chunk, where a job
              found nothing)

``RunContext.reading`` counts it: how many chunks there were, how many the model read and passed on, how many
it skipped and why, and the head of the ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from minions.chunking import Chunk

from .aggregate import Finding
from .context import RunContext
from .jobs import Job, run_jobs, scores_sentences
from .ranking import Ranked, fused_order, lexical_rank
from .result import Evidence, JobRecord

__all__ = ["RANKED_SHOWN", "Reading", "chunk_evidence", "evidence", "read"]

RANKED_SHOWN = 20
"""The head of the ranking kept in ``RunContext.reading["ranked"]`` (document, chunk index), best first."""


class Reading:
    """The outcome of ``read``: the chunks in their final order, the jobs that read them, best first."""

    def __init__(self, ranked: list[Ranked], jobs: list[Job], records: list[JobRecord]) -> None:
        self.ranked = ranked
        self.jobs = jobs
        self.records = records

    def passed_on(self, k: int) -> list[tuple[Ranked, Job]]:
        """The best ``k`` chunks that a job read, with their job."""
        by_chunk = {(j.chunk.document, j.chunk.index): j for j in self.jobs}
        read = [(r, by_chunk.get((r.chunk.document, r.chunk.index))) for r in self.ranked]
        return [(r, j) for r, j in read if j is not None][:k]


def read(ctx: RunContext, chunks: Sequence[Chunk], question: str, *, query: str | None = None) -> Reading:
    """Rank ``chunks`` for ``question`` (BM25 over ``query``, default the question), run the evidence jobs over
    the best, and re-rank those by the model's scores when it gave them."""
    o = ctx.options
    with ctx.timed("rank"):
        ranked = lexical_rank(chunks, query or question, question=question)
    scoring = scores_sentences(ctx)
    n = min(max(o.rerank, o.read_chunks) if scoring else o.read_chunks, len(ranked))
    jobs = [Job(ctx.next_job_id + i, 1, question, r.chunk) for i, r in enumerate(ranked[:n])]
    records = run_jobs(ctx, jobs)
    scores = [r.score for r in records]
    if records and all(s is not None for s in scores):
        head = fused_order([s for s in scores if s is not None])
        ranked = [replace(ranked[i], score=f, model=scores[i]) for i, f in head] + ranked[n:]
    _count(ctx, len(chunks), n, min(o.read_chunks, n), ranked, scored=scoring)
    return Reading(ranked, jobs, records)


def _count(ctx: RunContext, chunks: int, read: int, passed: int, ranked: Sequence[Ranked], *, scored: bool) -> None:
    how = "BM25 and the local model's yes/no scores of each chunk and its sentences" if scored else "BM25"
    ctx.reading.update(
        chunks=ctx.reading.get("chunks", 0) + chunks,
        read=ctx.reading.get("read", 0) + read,
        passed_on=ctx.reading.get("passed_on", 0) + passed,
        skipped=ctx.reading.get("skipped", 0) + chunks - read,
        why=f"ranked by {how}; chunks below the best {read} by words are not read",
        ranked=[[r.chunk.document, r.chunk.index] for r in ranked[:RANKED_SHOWN]],
    )


def chunk_evidence(chunk: Chunk, *, kind: str = "chunk", score: float | None = None) -> Evidence:
    return Evidence(chunk.document, chunk.text, chunk.start, chunk.end, tuple(chunk.pages), kind, score)


def evidence(passed: Sequence[tuple[Ranked, Job]], findings: Sequence[Finding]) -> list[Evidence]:
    """What is passed on, best first: each chunk's quote when its job found one, else the chunk."""
    by_job = {f.job_id: f for f in findings}
    out = []
    for r, job in passed:
        f = by_job.get(job.job_id)
        c = f.citation if f is not None else None
        if c is not None:
            out.append(Evidence(c.document, c.text, c.start, c.end, c.pages, "quote", r.score))
        else:
            out.append(chunk_evidence(r.chunk, score=r.score))
    return out
