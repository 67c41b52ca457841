"""``LocalOnly``: the default protocol without a remote model. The local model reads the chunks that rank best and
answers with the sentence that holds the fact, and its place; nothing leaves the device."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from minions.chunking import chunk_documents

from .base import BaseProtocol
from .context import RunContext
from .evidence.choosing import choice_answer, choose
from .evidence.citations import Finding, aggregate, place
from .evidence.reading import evidence, read
from .evidence.written import written_answer
from .search.profiles import GENERAL, Knowledge
from .search.ranking import word_order

__all__ = ["LocalOnly", "best_quotes", "local_answer"]

MAX_CITATIONS = 5


class LocalOnly(BaseProtocol):
    """Nothing leaves the device (unless the local model is on another machine: then its prompts are recorded as
    egress). The local model reads the chunks that rank best for the task, picks in each the sentence that answers
    it (``protocols.evidence.reading``), and the answer is the best-ranked quote with its place; when no chunk has one,
    the answer says so instead of inventing one. A capable local model (``answer="write"``, the default from 1B
    parameters) writes the answer from those quotes instead, citing them; what it writes stands only where its
    quotes state every figure and name in it (``protocols.evidence.written``). A question with a closed set of
    answers (yes/no, options) is answered with the one the local model chooses on its quotes, then the quote
    (``protocols.evidence.choosing``)."""

    name: ClassVar[str] = "local"

    def _run(self, ctx: RunContext) -> None:
        ctx.rounds = 1
        o = ctx.options
        chunks = [] if ctx.ranking is not None else chunk_documents(ctx.documents, by=o.chunk_by, size=o.chunk_size,
                                                                    overlap=o.overlap)  # fmt: skip
        reading = read(ctx, chunks, ctx.task)
        docs = {d.name: d for d in ctx.documents}
        checked, findings = aggregate(ctx.jobs, {j.job_id: j.chunk for j in reading.jobs}, docs)
        ctx.jobs[:] = checked
        passed = reading.passed_on(o.read_chunks)
        ctx.evidence = evidence(passed, findings)
        by_job = {f.job_id: f for f in findings if f.citation is not None}
        quoted = best_quotes([by_job[j.job_id] for _, j in passed if j.job_id in by_job], ctx.task, ctx.knowledge)
        ctx.citations = [f.citation for f in quoted if f.citation is not None][:MAX_CITATIONS]
        failed = sum(r.failed_in_backend for r in reading.records)
        searched = ctx.ranking.chunks if ctx.ranking is not None else len(chunks)
        ctx.best_answer = local_answer(quoted, read=len(reading.jobs) - failed, chunks=searched, failed=failed)
        choice = choose(ctx, ctx.citations)
        if choice is not None:
            ctx.best_answer = choice_answer(choice, ctx.citations[0])
        else:
            ctx.best_answer = written_answer(ctx, ctx.citations, ctx.best_answer)


def best_quotes(findings: Sequence[Finding], question: str, knowledge: Knowledge = GENERAL) -> list[Finding]:
    """``findings`` (in their chunks' rank order) re-ordered by how well their quotes alone match ``question``
    (``search.ranking.word_order`` over the quotes, with what the documents' profile adds; ties keep the chunks'
    order): the answer is a sentence, and a sentence that holds the question's terms beats one from a chunk that
    holds them elsewhere."""
    texts = [f.citation.text if f.citation is not None else "" for f in findings]
    return [findings[i] for i, _ in word_order(texts, question, knowledge=knowledge)]


def local_answer(findings: Sequence[Finding], *, read: int, chunks: int, failed: int = 0) -> str:
    """The best-ranked finding as a sentence, then its quote and its place; or that nothing was found (in the
    ``read`` passages the local model read; ``failed`` more it could not, which the run's notes explain)."""
    if not findings and failed:
        read_part = f"it read {read} of them and none says it" if read else "it read none of them"
        return (
            f"The local model failed on {failed} of the {read + failed} passages that match the question best "
            f"(see the notes); {read_part}."
        )
    if not findings:
        return (
            f"The documents do not seem to answer this: the local model read the {read} passages (of {chunks}) "
            "that match the question best, and none of them says it."
        )
    best, c = findings[0], findings[0].citation
    assert c is not None
    if best.answer != c.text:
        return f"{best.answer}, according to {place(c)}:\n\u201c{c.text}\u201d"
    return f"According to {place(c)}:\n\u201c{c.text}\u201d"
