"""The local reading, one pipeline read top to bottom (``read_and_answer``): each step is a function that returns
to it, and the run's context passes through each step's module once.

    rank      the chunks, best first: by words (BM25 over the question, with the figure prior:
              ``protocols.search.ranking.lexical_rank``), fused with meaning where an embedding model is to hand
              (``rank``: as a library ranks its own); a library's ranking instead where the run was given one
    budget    the best ``read_chunks``; where the backend says what a prompt costs, the chunks past ``read_tokens``
              new prompt tokens are quoted by words instead of read (``within_budget``)
    jobs      evidence-first jobs over them (``jobs.read_chunks``): each picks the sentence of its chunk that
              answers (named by its line's label where the local model reports log-probabilities, else chosen
              through a schema) among those closest to the question by words, and by meaning where the chunks
              were ranked with an embedding model on this device (``_sentence_meaning``)
    cite      each quote checked against its chunk and placed; what is passed on, in rank order: each chunk's quote
              (or the chunk, where its job found nothing) (``citations.aggregate``, ``citations.evidence``)
    quotes    the quotes re-ordered by how well they alone match the question, by words and meaning, beside their
              chunks' place in the ranking (``quotes.best_quotes``)
    answer    the best quote with its place (``quotes.local_answer``); a closed question's choice on the quotes
              (``choosing``), or a capable model's answer written from them (``written``)

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
from ..search.meaning import SentenceMeaning, rank_loaded, sentence_meaning
from ..search.ranking import Ranked, lexical_rank
from .choosing import choice_answer, choose
from .citations import aggregate, evidence
from .jobs import job_request, read_chunks
from .quotes import best_quotes, local_answer
from .written import written_answer

__all__ = ["MAX_CITATIONS", "RANKED_SHOWN", "PromptCounter", "rank", "read_and_answer", "within_budget"]

MAX_CITATIONS = 5
"""The quotes an answer keeps as its citations, best first."""
RANKED_SHOWN = 20
"""The head of the ranking kept in ``RunContext.reading["ranked"]`` (document, chunk index), best first."""


def read_and_answer(ctx: RunContext, chunks: Sequence[Chunk]) -> None:
    """Rank ``chunks`` for the task (``ctx.ranking`` instead where the run was given one), read the best within the
    budget, and set the run's evidence, citations and answer (the steps: the module's docstring)."""
    o, question = ctx.options, ctx.task
    # rank
    if ctx.ranking is not None:
        ranked, total = list(ctx.ranking.ranked), ctx.ranking.chunks
    else:
        ranked, total = rank(ctx, chunks, question), len(chunks)
    # budget
    head = [r.chunk for r in ranked[: min(o.read_chunks, len(ranked))]]
    by_model = within_budget(ctx, question, head)
    # jobs
    meaning = _sentence_meaning(ctx, question)
    ctx.reading["sentences"] = meaning.embedder.name if meaning is not None else "words"
    read = read_chunks(ctx, question, head, by_model, meaning)
    jobs, records = read.jobs, read.records
    ranked = [replace(r, model=rec.score) for r, rec in zip(ranked, records, strict=False)] + ranked[len(records) :]
    _count(ctx, total, len(head), ranked, scored=read.scored, by_words=by_model.count(False))
    # cite
    checked, findings = aggregate(ctx.jobs, {j.job_id: j.chunk for j in jobs}, {d.name: d for d in ctx.documents})
    ctx.jobs[:] = checked
    ctx.evidence = evidence([(r.chunk, r.score, j.job_id) for r, j in zip(ranked, jobs, strict=False)], findings)
    # quotes
    by_job = {f.job_id: f for f in findings if f.citation is not None}
    quoted = best_quotes([by_job[j.job_id] for j in jobs if j.job_id in by_job], question, ctx.knowledge, meaning)
    ctx.citations = [f.citation for f in quoted if f.citation is not None][:MAX_CITATIONS]
    # answer
    failed = sum(r.failed_in_backend for r in records)
    ctx.best_answer = local_answer(quoted, read=len(jobs) - failed, chunks=total, failed=failed)
    choice = choose(ctx, ctx.citations)
    if choice is not None:
        ctx.best_answer = choice_answer(choice, ctx.citations[0])
    else:
        ctx.best_answer = written_answer(ctx, ctx.citations, ctx.best_answer)


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


def _sentence_meaning(ctx: RunContext, question: str) -> SentenceMeaning | None:
    """The sentences' closeness to ``question``, by the model that ranked a library's chunks (None: it ranked them
    by words alone), else the run's (``RunContext.embedder``), where it runs on this device."""
    embedder = ctx.ranking.embedder if ctx.ranking is not None else ctx.embedder
    if embedder is None:
        return None
    with ctx.timed("rank"):
        return sentence_meaning(embedder, question=question)


@runtime_checkable
class PromptCounter(Protocol):
    """A backend that says what each prompt would cost it now (``LlamaCppBackend``: saved chunk states are free; a
    server, ``AskingBackend`` or a fleet: the whole prompt, counted)."""

    def prompt_tokens(self, requests: Sequence[ChatRequest]) -> list[int]: ...


def within_budget(ctx: RunContext, question: str, chunks: Sequence[Chunk]) -> list[bool]:
    """Which of ``chunks`` (best first) the local model reads for ``question``: the first, then each whose job's
    prompt still fits in ``RunOptions.read_tokens`` after those before it; all where there is no limit, where the
    backend cannot say what a prompt costs, or where it runs on another machine (a server past this device
    computes on its own)."""
    budget = ctx.options.read_tokens
    local = ctx.local
    if budget is None or not chunks or not isinstance(local, PromptCounter) or not local.capabilities.local:
        return [True] * len(chunks)
    costs = local.prompt_tokens([job_request(question, c, SamplingParams()) for c in chunks])
    chosen, spent = [], 0
    for i, cost in enumerate(costs):
        read = i == 0 or spent + cost <= budget
        spent += cost if read else 0
        chosen.append(read)
    return chosen


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
