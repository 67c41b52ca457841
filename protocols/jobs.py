"""Running local jobs: one instruction over one chunk, many at once through the backend's ``batch``.

A job's prompt puts what jobs share first (the system prompt, then the instruction) and the chunk last, so
a local engine can reuse the shared prefix across chunks. A job that fails or replies malformed JSON is
retried once; after that it is recorded as failed, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from minions.backends.base import Backend, error_result
from minions.chunking import Chunk
from minions.errors import BackendError
from minions.events import JobFailed, JobFinished, JobStarted, emit
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

from .channel import priced
from .context import RunContext
from .parsing import extract_json, salvage_fields
from .prompts import render
from .result import JobRecord
from .schemas import JOB_OUTPUT_SCHEMA, JobOutput

__all__ = ["Job", "job_messages", "run_jobs"]

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


def job_messages(instruction: str, chunk: Chunk) -> list[Message]:
    return [
        Message("system", render("job_system")),
        Message("user", render("job", instruction=instruction, label=chunk.label, text=chunk.text)),
    ]


def _params(ctx: RunContext, job: Job, attempt: int) -> SamplingParams:
    # Samples and retries differ by seed and a little temperature; a first sample is greedy.
    varied = job.sample > 0 or attempt > 0
    params = SamplingParams(
        max_tokens=ctx.options.job_max_tokens, temperature=0.7 if varied else 0.0, seed=job.sample * 101 + attempt
    )
    if ctx.local.capabilities.json_schema:
        params = params.with_(json_schema=JOB_OUTPUT_SCHEMA)
    return params


def _call(backend: Backend, requests: list[ChatRequest]) -> list[ChatResult]:
    """``backend.batch``, where a backend that dies takes down its jobs, not the run."""
    if not requests:
        return []
    try:
        return backend.batch(requests)
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


def _run_attempt(
    ctx: RunContext, jobs: Sequence[Job], attempt: int
) -> list[tuple[ChatResult, JobOutput | None, str | None]]:
    requests = [ChatRequest(job_messages(j.instruction, j.chunk), _params(ctx, j, attempt)) for j in jobs]
    with ctx.timed("local"):
        results = _call(ctx.local, requests)
    for r in results:
        ctx.meter.add("local", priced(ctx.local, r.usage, ctx.options.price_table))
    return [(r, *_parse(r)) for r in results]


def _run_batch(ctx: RunContext, jobs: Sequence[Job]) -> list[JobRecord]:
    for j in jobs:
        emit(ctx.events, JobStarted(j.job_id, j.round, j.label))
    first = _run_attempt(ctx, jobs, 0)
    failed = [i for i, (_, out, _) in enumerate(first) if out is None]
    for i in failed:
        emit(ctx.events, JobFailed(jobs[i].job_id, jobs[i].round, jobs[i].label, first[i][2] or "", True))
    if ctx.cancelled:  # no retries once cancelled; the batch's finished jobs are still recorded
        failed = []
    retried = dict(zip(failed, _run_attempt(ctx, [jobs[i] for i in failed], 1), strict=True))
    records = []
    for i, job in enumerate(jobs):
        result, output, error = retried.get(i, first[i])
        record = _record(job, result, output, error, attempts=2 if i in retried else 1)
        if record.ok:
            emit(ctx.events, JobFinished(job.job_id, job.round, job.label, record.answer))
        else:
            emit(ctx.events, JobFailed(job.job_id, job.round, job.label, error or "", False))
        records.append(record)
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
    return records
