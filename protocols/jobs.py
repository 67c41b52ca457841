"""Running local jobs: one instruction over one chunk, many at once through the backend's ``batch``.

A job's prompt puts what jobs share first (the system prompt, then the instruction or the chunk, whichever
more jobs share: see ``chunk_first``), so a local engine can reuse the shared prefix. A job that fails or
replies malformed JSON is retried once; after that it is recorded as failed, never fatal.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from minions.backends.base import Backend, OnResult, error_result
from minions.chunking import Chunk
from minions.errors import BackendError
from minions.events import CancelToken, JobFailed, JobFinished, JobStarted, emit
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

from .channel import priced
from .context import RunContext
from .parsing import extract_json, salvage_fields
from .prompts import render
from .result import JobRecord
from .schemas import JOB_OUTPUT_SCHEMA, JobOutput

__all__ = ["Job", "chunk_first", "job_messages", "run_jobs"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    job_id: int
    round: int
    instruction: str
    chunk: Chunk
    sample: int = 0

    @property
    def label(self) -> str:
        return self.chunk.label + (f" (sample {self.sample + 1})" if self.sample else "")


def job_messages(instruction: str, chunk: Chunk, *, chunk_first: bool = False) -> list[Message]:
    text = render("job", instruction=instruction, label=chunk.label, text=chunk.text, chunk_first=chunk_first)
    return [Message("system", render("job_system")), Message("user", text)]


def chunk_first(jobs: Sequence[Job]) -> bool:
    """Whether the chunk should come before the instruction in these jobs' prompts.

    A local engine computes a shared prompt prefix once. With one instruction over many chunks the instruction
    is what jobs share; with several instructions over the same chunks each chunk is shared by several jobs,
    and chunks are long. Put first whichever saves more characters of prompt."""
    instr_uses = Counter(j.instruction for j in jobs)
    chunk_uses = Counter((j.chunk.document, j.chunk.index) for j in jobs)
    chunk_len = {(j.chunk.document, j.chunk.index): len(j.chunk.text) for j in jobs}
    shared_if_instruction_first = sum((n - 1) * len(i) for i, n in instr_uses.items())
    shared_if_chunk_first = sum((n - 1) * chunk_len[c] for c, n in chunk_uses.items())
    return shared_if_chunk_first > shared_if_instruction_first


def _params(ctx: RunContext, job: Job, attempt: int) -> SamplingParams:
    # Samples and retries differ by seed and a little temperature; a first sample is greedy.
    varied = job.sample > 0 or attempt > 0
    params = SamplingParams(
        max_tokens=ctx.options.job_max_tokens, temperature=0.7 if varied else 0.0, seed=job.sample * 101 + attempt
    )
    if ctx.local.capabilities.json_schema:
        params = params.with_(json_schema=JOB_OUTPUT_SCHEMA)
    return params


def _call(
    backend: Backend, requests: list[ChatRequest], cancel: CancelToken | None, on_result: OnResult
) -> list[ChatResult]:
    """``backend.batch``, where a backend that dies takes down its jobs, not the run."""
    if not requests:
        return []
    try:
        return backend.batch(requests, on_result=on_result, cancel=cancel)
    except BackendError as exc:
        log.warning("local batch of %d jobs failed: %s", len(requests), exc)
        return [error_result(backend.name, exc) for _ in requests]


def _parse(result: ChatResult) -> tuple[JobOutput | None, str | None]:
    if not result.ok:
        return None, result.error or "the job failed"
    try:
        return JobOutput.model_validate(extract_json(result.text)), None
    except (ValueError, ValidationError) as exc:
        # A reply cut off by max_tokens still says what it found before the cut.
        fields = salvage_fields(result.text, ("answer", "citation", "explanation"))
        if fields.get("answer") is not None:
            return JobOutput.model_validate(fields), None
        return None, f"malformed reply: {exc}"


def _record(job: Job, result: ChatResult, output: JobOutput | None, error: str | None, attempts: int) -> JobRecord:
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
        error=error,
        raw=result.text[:2000],
        sample=job.sample,
    )


Outcome = tuple[ChatResult, JobOutput | None, str | None]


def _run_attempt(ctx: RunContext, jobs: Sequence[Job], attempt: int) -> list[Outcome]:
    """One attempt at ``jobs``. Each job's event goes out as soon as the backend returns it, so progress is live
    and a client that goes away mid-batch can cancel the rest."""
    first = chunk_first(jobs)
    requests = [
        ChatRequest(job_messages(j.instruction, j.chunk, chunk_first=first), _params(ctx, j, attempt)) for j in jobs
    ]
    outcomes: dict[int, Outcome] = {}

    def on_result(i: int, result: ChatResult) -> None:
        outcome = outcomes[i] = (result, *_parse(result))
        job, output, error = jobs[i], outcome[1], outcome[2]
        if output is not None:
            emit(ctx.events, JobFinished(job.job_id, job.round, job.label, output.answer))
        else:
            retry = attempt == 0 and not ctx.cancelled
            emit(ctx.events, JobFailed(job.job_id, job.round, job.label, error or "", retry))

    with ctx.timed("local"):
        results = _call(ctx.local, requests, ctx.cancel, on_result)
    for i, r in enumerate(results):
        ctx.meter.add("local", priced(ctx.local, r.usage, ctx.options.price_table))
        if i not in outcomes:  # a backend that failed as a whole never reported its jobs one by one
            on_result(i, r)
    return [outcomes[i] for i in range(len(results))]


def _run_batch(ctx: RunContext, jobs: Sequence[Job]) -> list[JobRecord]:
    for j in jobs:
        emit(ctx.events, JobStarted(j.job_id, j.round, j.label))
    first = _run_attempt(ctx, jobs, 0)
    failed = [] if ctx.cancelled else [i for i, (_, out, _) in enumerate(first) if out is None]
    retried = dict(zip(failed, _run_attempt(ctx, [jobs[i] for i in failed], 1), strict=True))
    records = []
    for i, job in enumerate(jobs):
        result, output, error = retried.get(i, first[i])
        records.append(_record(job, result, output, error, attempts=2 if i in retried else 1))
    return records


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
