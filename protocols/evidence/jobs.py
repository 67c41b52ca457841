"""Running local jobs: one instruction over one chunk, many at once through the backend's ``batch``.

A job is evidence-first (``protocols.evidence.quotes``): the local model picks the sentence of its chunk that answers
the instruction, never writes one. Its prompt puts the chunk first, its sentences and table rows a labelled line each
("[A] ...", "[B] ..."), then the question, so every job over a chunk shares the prefix "system prompt + chunk",
which a local engine computes once and saves (``PromptPrefix``). Where the backend reports log-probabilities the
reply starts "The line that answers is" and one token's distribution over the labels scores the chunk's
candidates; elsewhere a JSON schema allows only the candidates (and a figure of the chosen one as the short
answer), so the quote is verbatim by construction either way. A job that fails or replies malformed JSON is
retried once; after that it is recorded as failed, never fatal. A chunk past the local model's reading budget is
quoted by words instead (``by_words``: its best sentence by words), with no job run (``read_chunks``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from minions.backends.base import OnResult, error_result
from minions.chunking import Chunk
from minions.errors import BackendError, ModelOutputError, NoLogprobsError
from minions.events import JobFailed, JobFinished, JobStarted, emit
from minions.loops import repeating
from minions.types import ChatRequest, ChatResult, Message, PromptPrefix, SamplingParams, Timings, Usage

from ..channel import priced
from ..context import RunContext
from ..parsing import extract_json, normalize, salvage_fields
from ..prompts import render
from ..result import JobRecord
from ..schemas import JobOutput
from ..search.meaning import SentenceMeaning
from ..search.profiles import GENERAL, Knowledge
from ..search.ranking import fused_order
from ..search.sentences import Span
from ..search.words import tokenize
from .citations import verify_citation
from .quotes import LABELS, NONE, answer_spans, candidates, labeled, quote_schema

__all__ = [
    "BY_WORDS",
    "ChunksRead",
    "Job",
    "answer_step",
    "by_words",
    "job_messages",
    "job_request",
    "looping",
    "pick_sentence",
    "prefix_order",
    "read_chunks",
    "run_jobs",
    "scored_request",
    "scores_sentences",
]

log = logging.getLogger(__name__)

Ask = Literal["quote", "label"]
SCORE_TOP_TOKENS = 20
"""Most likely reply tokens a scored job reads where the label comes (the labels of the lines it is likely to name)."""
SCORE_REPLY_TOKENS = 10
"""Reply tokens a scored job may take. A backend that continues the reply's start ("The line that answers is")
names the label at its first token; a server that opens a new reply instead (llama-cpp-python's, vLLM's: a chat
template closes the assistant's message) writes the start again, then the label, some 6 tokens in."""
SCORE_STOP = (".", "\n")
"""A scored reply ends after the label: "B." """
SENTENCE_MODEL_WEIGHT = 0.5
"""The model's weight against the words' in choosing a chunk's sentence: words lead (the question's terms are in
the sentence that answers it), the model re-orders close calls."""
REPEATED_WORDS = 15
"""Words of one stretch repeated at the end of a reply that mark it as looping (``minions.loops``)."""
SENTENCES_SCORED = 4
"""Candidate sentences of a chunk (the best by words) whose labels' log-probabilities the pick weighs."""
BY_WORDS = "quoted by words: past the prompt tokens the local model may compute for a question (read_tokens)"
"""A job record's explanation where the model did not read the chunk (``by_words``)."""


@dataclass(frozen=True)
class Job:
    job_id: int
    round: int
    instruction: str
    chunk: Chunk
    sample: int = 0
    options: tuple[Span, ...] = field(default=(), compare=False)
    """The sentences the job may quote; computed from the chunk and the instruction when not given."""
    knowledge: Knowledge = field(default=GENERAL, compare=False, repr=False)
    """What the documents add to the core of search (``search.profiles``), for choosing the sentences."""
    meaning: SentenceMeaning | None = field(default=None, compare=False, repr=False)
    """The sentences' closeness to the instruction, for choosing them beside words (None: words alone)."""

    def __post_init__(self) -> None:
        if not self.options:
            found = candidates(self.chunk, self.instruction, knowledge=self.knowledge, meaning=self.meaning)
            object.__setattr__(self, "options", tuple(found))

    @property
    def label(self) -> str:
        return self.chunk.label + (f" (sample {self.sample + 1})" if self.sample else "")


def job_messages(instruction: str, chunk: Chunk, ask: Ask = "quote") -> list[Message]:
    """The prompt of a job over ``chunk``: the chunk first (its sentences a line each, labelled), then the question
    and what to reply (``quote``: the sentence that answers, as JSON; ``label``: the letter of its line)."""
    return list(job_request(instruction, chunk, SamplingParams(), ask).messages)


def job_request(instruction: str, chunk: Chunk, params: SamplingParams, ask: Ask = "quote") -> ChatRequest:
    """A job's request, its chunk marked as the prefix that every job over the chunk shares (``PromptPrefix``):
    a local engine keeps the state of "system prompt + chunk" and computes only the question after it."""
    excerpt = render("job_excerpt", label=chunk.label, lines=[(tag, s.text) for tag, s in labeled(chunk.text)])
    question = render("job", instruction=instruction, ask=ask)
    messages = [Message("system", render("job_system")), Message("user", f"{excerpt}\n\n{question}")]
    if ask == "label":  # the reply starts where the label comes next
        messages.append(Message("assistant", render("job_label_reply")))
    return ChatRequest(messages, params, prefix=PromptPrefix(1, len(excerpt)))


def scored_request(instruction: str, chunk: Chunk) -> ChatRequest:
    """A scored job's request (a backend that reports log-probabilities): the reply names the line that answers,
    and its label token's top log-probabilities score the chunk's lines."""
    params = SamplingParams(max_tokens=SCORE_REPLY_TOKENS, stop=SCORE_STOP, logprobs=SCORE_TOP_TOKENS)
    return job_request(instruction, chunk, params, "label")


def _params(ctx: RunContext, job: Job, attempt: int) -> SamplingParams:
    # Samples and retries differ by seed and a little temperature; a first sample is greedy.
    varied = job.sample > 0 or attempt > 0
    longest = max((len(s.text) for s in job.options), default=0)
    params = SamplingParams(
        # the quote (about one token per 3 characters, JSON escapes included), its figure and the JSON around them
        max_tokens=max(ctx.options.job_max_tokens, longest // 2 + 64),
        temperature=0.7 if varied else 0.0,
        seed=job.sample * 101 + attempt,
    )
    return params.with_(json_schema=quote_schema(job.options)) if ctx.local.capabilities.json_schema else params


def _call(ctx: RunContext, requests: list[ChatRequest], on_result: OnResult) -> list[ChatResult]:
    """``ctx.local.batch``, where a backend that dies takes down its jobs, not the run. The time the batch spent in
    prefill and in decode (where the backend tells: the local engine does) adds up in ``ctx.timings``. A backend
    that runs its jobs one after another (no ``batching``) gets them in ``prefix_order``."""
    if not requests:
        return []
    backend = ctx.local
    order = list(range(len(requests))) if backend.capabilities.batching else prefix_order(requests)
    with ctx.timed("local"):
        try:
            sent = backend.batch(
                [requests[i] for i in order], on_result=lambda k, r: on_result(order[k], r), cancel=ctx.cancel
            )
        except BackendError as exc:
            log.warning("local batch of %d jobs failed: %s", len(requests), exc)
            return [error_result(backend.name, exc) for _ in requests]
    by_index = dict(zip(order, sent, strict=True))
    results = [by_index[i] for i in range(len(requests))]
    batch = next((r.stats["batch"] for r in results if isinstance(r.stats.get("batch"), dict)), None)
    if batch is not None:
        for key in ("prefill_s", "decode_s"):
            ctx.timings[f"local_{key}"] = ctx.timings.get(f"local_{key}", 0.0) + float(batch.get(key, 0.0))
    return results


def prefix_order(requests: Sequence[ChatRequest]) -> list[int]:
    """The indices of ``requests`` with those that share a marked prefix (a chunk) next to each other, groups in the
    order of their first request: a server that runs one prompt at a time and keeps the last one's state
    (llama-cpp-python's) then computes a chunk once for all the questions over it."""
    groups: dict[object, list[int]] = {}
    for i, request in enumerate(requests):
        groups.setdefault(request.shared_text() or i, []).append(i)
    return [i for group in groups.values() for i in group]


def _parse(job: Job, result: ChatResult) -> tuple[JobOutput | None, BaseException | None]:
    """The job's quote (one of its options, or "none") and the short answer, which must be a figure of the
    quote, or why there is none: the backend's error for a failed job, ``ModelOutputError`` for an unusable
    reply. A backend that does not enforce the schema may write a quote of its own: it counts only when it is
    (near-)verbatim in the chunk."""
    if not result.ok:
        return None, failure(result)
    if looping(result):
        return None, ModelOutputError("degenerate reply: it started repeating itself and was cut", raw=result.text)
    try:
        reply: dict[str, object] = extract_json(result.text)
    except ValueError as exc:
        # A reply cut off by max_tokens still holds the quote it was copying.
        reply = dict(salvage_fields(result.text, ("quote", "answer")))
        if not reply.get("quote"):
            return None, ModelOutputError(f"malformed reply: {exc}", raw=result.text)
    quote = reply.get("quote")
    if not isinstance(quote, str) or normalize(quote) in ("", NONE):
        return JobOutput(), None
    chosen = next((s.text for s in job.options if s.text == quote), None)
    if chosen is None and verify_citation(quote, job.chunk.text):
        chosen = quote.strip()
    if chosen is None:
        return None, ModelOutputError("malformed reply: the quote is not in the excerpt", raw=result.text)
    answer = reply.get("answer")
    short = answer if isinstance(answer, str) and answer in answer_spans(chosen) else None
    return JobOutput(answer=short or chosen, citation=chosen), None


def failure(result: ChatResult) -> BaseException:
    """The exception of a failed ``result``: the one the backend raised, else a ``BackendError`` with its text."""
    return result.exception or BackendError(result.error or "the job failed", backend=result.model)


def _error_text(result: ChatResult, error: BaseException | None) -> str | None:
    """What a record and an event say: the backend's own text for a failed job (it names the error's class)."""
    if error is None:
        return None
    return (result.error if not result.ok else None) or str(error)


def looping(result: ChatResult) -> bool:
    """Whether a reply was cut in a loop (the local engine says so) or ends in one (any backend, by words)."""
    return bool(result.stats.get("looping")) or repeating(result.text.split(), min_items=REPEATED_WORDS) > 0


def _record(
    job: Job, result: ChatResult, output: JobOutput | None, error: BaseException | None, attempts: int
) -> JobRecord:
    c = job.chunk
    return JobRecord(
        job_id=job.job_id,
        round=job.round,
        instruction=job.instruction,
        document=c.document,
        chunk=c.index,
        pages=tuple(c.pages),
        attempts=attempts,
        ok=output is not None,
        answer=output.answer if output else None,
        explanation=output.explanation if output else "",
        citation=output.citation if output else None,
        error=_error_text(result, error),
        raw=result.text[:2000],
        sample=job.sample,
        score=_model_score(result),
        exception=error,
    )


def _model_score(result: ChatResult) -> float | None:
    """How sure the local model was of its choice: the log-probability of the best candidate's label (scored jobs)."""
    scores = result.stats.get("sentence_logprobs")
    return max(scores) if scores else None


Outcome = tuple[ChatResult, JobOutput | None, BaseException | None]


def _run_attempt(ctx: RunContext, jobs: Sequence[Job], attempt: int) -> list[Outcome]:
    """One attempt at ``jobs``. Each job's event goes out as soon as the backend returns it, so progress is live
    and a client that goes away mid-batch can cancel the rest."""
    requests = [job_request(j.instruction, j.chunk, _params(ctx, j, attempt)) for j in jobs]
    return _attempt(ctx, jobs, requests, attempt, lambda job, result: (result, *_parse(job, result)))


def _attempt(
    ctx: RunContext,
    jobs: Sequence[Job],
    requests: list[ChatRequest],
    attempt: int,
    outcome: Callable[[Job, ChatResult], Outcome],
) -> list[Outcome]:
    """Run ``requests`` (one a job), each reply made an ``Outcome`` by ``outcome`` and announced as soon as the
    backend returns it, and every job's local usage metered."""
    outcomes: dict[int, Outcome] = {}

    def on_result(i: int, result: ChatResult) -> None:
        outcomes[i] = outcome(jobs[i], result)
        _announce(ctx, jobs[i], outcomes[i], attempt)

    results = _call(ctx, requests, on_result)
    for i, r in enumerate(results):
        ctx.meter.add("local", priced(ctx.local, r.usage, ctx.options.price_table))
        if i not in outcomes:  # a backend that failed as a whole never reported its jobs one by one
            on_result(i, r)
    return [outcomes[i] for i in range(len(results))]


def _scored(job: Job, result: ChatResult) -> Outcome:
    """A job whose candidate sentences the model scored by the log-probability of their labels (``result``: one
    reply token, with its top log-probabilities): the quote is the candidate ranked best by that fused with its
    rank by words."""
    label_of = {(s.start, s.end): tag for tag, s in labeled(job.chunk.text)}
    read = _label_logprobs(result)
    if read is None:
        error = failure(result) if not result.ok else NoLogprobsError("the backend reported no log-probabilities")
        return error_result(result.model, error), None, error
    logprobs, floor = read
    options = job.options[:SENTENCES_SCORED]
    scores = [logprobs.get(label_of.get((s.start, s.end), ""), floor) for s in options]
    best = pick_sentence(options, scores, job.instruction) if scores else None
    quote = options[best].text if best is not None else None
    reply = {"quote": quote or NONE, "sentence_logprobs": scores}
    scored = ChatResult(json.dumps(reply), result.usage, "stop", result.timings, result.model, stats=reply)
    return scored, JobOutput(answer=quote, citation=quote), None


def pick_sentence(options: Sequence[Span], model_scores: Sequence[float], question: str) -> int:
    """The index of the option to quote. ``options`` come best first (by words, and by meaning where the run weighs
    it: ``quotes.candidates``); the model's scores (one per option) re-order the first and those that share a word
    with the question, fused with their order (``fused_order``, ``SENTENCE_MODEL_WEIGHT`` on the model's term),
    and never lift another that shares no word over them: a model that favours early labels must not quote a
    sentence unrelated to the question. When no option shares a word, the fusion weighs them all."""
    terms = set(tokenize(question))
    shared = [i for i, s in enumerate(options) if terms & set(tokenize(s.text))]
    pool = sorted({0, *shared}) if shared else list(range(len(options)))
    best, _ = fused_order([model_scores[i] for i in pool], weight=SENTENCE_MODEL_WEIGHT)[0]
    return pool[best]


def _score_attempt(ctx: RunContext, jobs: Sequence[Job], attempt: int) -> list[Outcome]:
    """Evidence by scoring (a backend that reports log-probabilities): the local model reads each job's chunk,
    its sentences a labelled line each, then the question, and names the line that answers; one reply token,
    whose distribution over the labels scores every candidate at once. The chunk is the prompt's prefix (saved
    and restored by a local engine), so a question computes only itself: some 40 tokens a chunk. A choice by
    scores is not led astray by the first tokens of a sentence, as a choice decoded token by token is."""
    requests = [scored_request(j.instruction, j.chunk) for j in jobs]
    return _attempt(
        ctx, jobs, requests, attempt, lambda job, result: _scored(job, result) if job.options else _nothing(ctx)
    )


def _nothing(ctx: RunContext) -> Outcome:
    """A chunk with no sentence to offer: it found nothing."""
    return ChatResult("", Usage(), "stop", Timings(), ctx.local.name), JobOutput(), None


def _announce(ctx: RunContext, job: Job, outcome: Outcome, attempt: int) -> None:
    result, output, error = outcome
    if output is not None:
        emit(ctx.events, JobFinished(job.job_id, job.round, job.label, output.answer))
    else:
        retry = attempt == 0 and not ctx.cancelled
        emit(ctx.events, JobFailed(job.job_id, job.round, job.label, _error_text(result, error) or "", retry))


def scores_sentences(ctx: RunContext) -> bool:
    """Whether jobs score their sentences (the backend reports log-probabilities, and ``score_sentences``), or pick
    one through a schema."""
    return ctx.local.capabilities.logprobs and ctx.options.score_sentences


def _run_batch(ctx: RunContext, jobs: Sequence[Job]) -> list[JobRecord]:
    for j in jobs:
        emit(ctx.events, JobStarted(j.job_id, j.round, j.label))
    attempt = _score_attempt if scores_sentences(ctx) else _run_attempt
    first = attempt(ctx, jobs, 0)
    failed = [] if ctx.cancelled else [i for i, (_, out, _) in enumerate(first) if out is None]
    # A reply without the log-probabilities it asked for would come back without them again: the schema path.
    unscored = {i for i in failed if isinstance(first[i][2], NoLogprobsError)}
    retried: dict[int, Outcome] = {}
    for again, indices in ((_run_attempt, sorted(unscored)), (attempt, [i for i in failed if i not in unscored])):
        retried.update(zip(indices, again(ctx, [jobs[i] for i in indices], 1), strict=True))
    records = []
    for i, job in enumerate(jobs):
        result, output, error = retried.get(i, first[i])
        records.append(_record(job, result, output, error, attempts=2 if i in retried else 1))
    return records


@dataclass(frozen=True)
class ChunksRead:
    """What ``read_chunks`` did: the jobs over the chunks (best first), their records in the same order, and whether
    the model scored its sentences (``scores_sentences``) or chose one through a schema."""

    jobs: list[Job]
    records: list[JobRecord]
    scored: bool


def read_chunks(
    ctx: RunContext,
    question: str,
    chunks: Sequence[Chunk],
    by_model: Sequence[bool],
    meaning: SentenceMeaning | None = None,
) -> ChunksRead:
    """A job of ``question`` over each of ``chunks`` (best first), and its record: run by the local model where
    ``by_model`` says so (``run_jobs``), else quoted by words (``by_words``); ``meaning``: the sentences offered
    ordered by their closeness too. Every record lands in ``ctx.jobs``, in job order."""
    jobs = [Job(ctx.next_job_id + i, 1, question, c, knowledge=ctx.knowledge, meaning=meaning)
            for i, c in enumerate(chunks)]  # fmt: skip
    read = iter(run_jobs(ctx, [j for j, model in zip(jobs, by_model, strict=True) if model]))
    records = [next(read) if model else by_words(job) for job, model in zip(jobs, by_model, strict=True)]
    ctx.jobs.extend(r for r, model in zip(records, by_model, strict=True) if not model)
    ctx.jobs.sort(key=lambda r: r.job_id)
    return ChunksRead(jobs, records, scores_sentences(ctx))


def by_words(job: Job) -> JobRecord:
    """A job the model did not read: its chunk's best sentence by words (``quotes.candidates``), quoted."""
    best = job.options[0].text if job.options else None
    c = job.chunk
    return JobRecord(job.job_id, job.round, job.instruction, c.document, c.index, tuple(c.pages), attempts=0,
                     ok=best is not None, answer=best, citation=best, explanation=BY_WORDS)  # fmt: skip


def run_jobs(ctx: RunContext, jobs: Sequence[Job]) -> list[JobRecord]:
    """Run ``jobs`` in batches, checking for cancellation between them; records land in ``ctx.jobs`` as each
    batch finishes, so a cancelled or stopped run keeps them."""
    records: list[JobRecord] = []
    size = ctx.options.batch_size
    for start in range(0, len(jobs), size):
        ctx.check_cancelled()
        batch = _run_batch(ctx, jobs[start : start + size])
        ctx.jobs.extend(batch)
        records.extend(batch)
    ctx.check_cancelled()
    return records


def _label_logprobs(result: ChatResult) -> tuple[dict[str, float], float] | None:
    """The log-probability of each label (``quotes.LABELS``) among the top log-probabilities of the reply token
    that names the line (spellings " B", "B", "[B" pooled by their best), and what a label outside them counts
    (just below the least likely reported); None when the backend reported none."""
    steps = result.stats.get("logprobs") if result.ok else None
    if not steps or not steps[0]:
        return None
    step = answer_step(steps, render("job_label_reply"))
    found: dict[str, float] = {}
    for text, lp in step:
        if (tag := _as_label(text)) is not None:
            found[tag] = max(float(lp), found.get(tag, float("-inf")))
    return found, min(float(lp) for _, lp in step) - 1.0


def _as_label(token: object) -> str | None:
    tag = str(token).strip().lstrip("[(").rstrip("]).:")
    return tag if len(tag) == 1 and tag in LABELS else None


def answer_step(
    steps: Sequence[Sequence[Sequence[Any]]], reply_start: str, named: Callable[[object], bool] | None = None
) -> Sequence[Sequence[Any]]:
    """The alternatives at the reply token that names the answer, the reply having been started with
    ``reply_start`` ("The line that answers is"). A backend that continued the reply's start names it first; a
    server whose chat template closed the start as a message of its own writes the start again, and the answer
    follows it (after a "[", if it writes one). A reply that does neither: its first token whose most likely
    spelling is an answer (``named``; default a line's label), else its first."""
    named = named or (lambda token: _as_label(token) is not None)
    start, text = _words(reply_start), ""
    for step in steps:
        if not step:
            break
        token = str(step[0][0])
        if _words(text) == start:  # the start, written again: the label comes now
            if token.strip(" [(") == "":
                continue
            return step
        text += token
        if not start.startswith(_words(text)):
            break  # not the start written again
    return next((step for step in steps if step and named(step[0][0])), steps[0])


def _words(text: str) -> str:
    return " ".join(text.split())
