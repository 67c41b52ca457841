"""Minions: the remote model plans jobs, the local model runs them over chunks, the remote model decides.

    round r:  plan (remote, round 1) or the decision's new jobs
              -> dispatch: instructions x chunks x samples, in batches on the local model
              -> aggregate: answers with checked citations, grouped by instruction
              -> decide (remote): a final answer, or feedback and new jobs for round r+1

The remote model sees the task, document descriptions and the digest of findings: never the chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from minions.chunking import Chunk, chunk_document
from minions.errors import ModelOutputError
from minions.events import PlanReady, RoundDone, emit
from minions.types import Message

from .base import BaseProtocol, describe_documents, to_json
from .context import RunCancelled, RunContext
from .evidence.citations import Finding, aggregate, best_answer, digest, finding_evidence
from .evidence.jobs import Job, run_jobs
from .prompts import render
from .result import Citation, JobRecord, RoundRecord
from .schemas import MAX_INSTRUCTION_CHARS, Decision, JobSpec, Plan
from .scope import bound_jobs, check_plan, chunks_in_scope

__all__ = ["Minions"]

log = logging.getLogger(__name__)

MAX_CITATIONS = 10


@dataclass
class _State:
    """What carries from round to round."""

    chunk_size: int
    samples: int
    findings: list[Finding] = field(default_factory=list)
    chunks: dict[int, Chunk] = field(default_factory=dict)
    """The chunk of every job, by job id."""


class Minions(BaseProtocol):
    name: ClassVar[str] = "minions"

    def _run(self, ctx: RunContext) -> None:
        plan = self._plan(ctx)
        by_chars = ctx.options.chunk_by == "chars"
        state = _State(plan.chunk_size if by_chars else ctx.options.chunk_size, plan.samples)
        specs: Sequence[JobSpec] = plan.jobs
        for round_ in range(1, ctx.options.max_rounds + 1):
            ctx.rounds = round_
            records = self._dispatch(ctx, round_, specs, state)
            new = self._aggregate(ctx, records, state)
            if records and not any(r.ok for r in records) and _all_errors(records):
                ctx.stop(f"All {len(records)} local jobs of round {round_} failed: {records[0].error}")
                return
            decision = self._decide(ctx, round_, state)
            _log_round(ctx, round_, records, decision)
            if decision.decision == "final":
                self._finish(ctx, decision, state.findings or new)
                return
            specs = decision.jobs

    # -- plan ---------------------------------------------------------------------------------------------
    def _plan(self, ctx: RunContext) -> Plan:
        docs = {d.name: d for d in ctx.documents}
        prompt = render(
            "plan",
            task=ctx.task,
            documents=describe_documents(ctx.documents),
            chunk_size=ctx.options.chunk_size,
            max_jobs=ctx.options.max_jobs_per_round,
        )
        try:
            with ctx.timed("plan"):
                return ctx.remote.ask(
                    [Message("user", prompt)], Plan, step="plan", round=1, check=lambda plan: check_plan(plan, docs)
                )
        except ModelOutputError as exc:
            if not ctx.options.fallback_plan:
                raise
            ctx.notice(f"No usable plan ({exc}); running the task as one retrieval job instead.")
            # the user's own question, cut to what an instruction may hold (people paste context into questions)
            task = ctx.remote.restore(ctx.task)[:MAX_INSTRUCTION_CHARS]
            return Plan(
                jobs=[JobSpec(instruction=task, scope="retrieve", query=task)], chunk_size=ctx.options.chunk_size
            )

    # -- dispatch -----------------------------------------------------------------------------------------
    def _jobs(self, ctx: RunContext, round_: int, specs: Sequence[JobSpec], state: _State) -> list[Job]:
        o, docs = ctx.options, {d.name: d for d in ctx.documents}
        chunks = {
            d.name: chunk_document(d, by=o.chunk_by, size=state.chunk_size, overlap=o.overlap) for d in ctx.documents
        }
        # Instructions came from the remote model: put back what redaction took out before the local model
        # reads them (it runs on this device).
        specs = [
            s.model_copy(
                update={
                    "instruction": ctx.remote.restore(s.instruction),
                    "query": ctx.remote.restore(s.query) if s.query else None,
                }
            )
            for s in specs
        ]
        scoped = [chunks_in_scope(s, chunks, docs, o.top_k) for s in specs]
        bounded, notices = bound_jobs(specs, scoped, state.samples, o.max_jobs_per_round)
        for message in notices:
            ctx.notice(message)
        jobs = [
            Job(0, round_, sj.instruction, c, sample)
            for sj in bounded
            for c in sj.chunks
            for sample in range(state.samples)
        ]
        if len(jobs) > o.max_jobs_per_round:
            ctx.notice(f"Round {round_} has {len(jobs)} jobs; running the first {o.max_jobs_per_round}.")
            jobs = jobs[: o.max_jobs_per_round]
        first = ctx.next_job_id
        return [Job(first + i, j.round, j.instruction, j.chunk, j.sample) for i, j in enumerate(jobs)]

    def _dispatch(self, ctx: RunContext, round_: int, specs: Sequence[JobSpec], state: _State) -> list[JobRecord]:
        jobs = self._jobs(ctx, round_, specs, state)
        emit(ctx.events, PlanReady(round_, len(jobs), tuple(dict.fromkeys(j.instruction for j in jobs))))
        state.chunks.update({j.job_id: j.chunk for j in jobs})
        start = len(ctx.jobs)
        try:
            run_jobs(ctx, jobs)
        except RunCancelled:  # the finished jobs still count towards the answer the run returns
            self._aggregate(ctx, ctx.jobs[start:], state)
            raise
        return ctx.jobs[start:]

    # -- aggregate ----------------------------------------------------------------------------------------
    def _aggregate(self, ctx: RunContext, records: list[JobRecord], state: _State) -> list[Finding]:
        checked, found = aggregate(records, state.chunks, {d.name: d for d in ctx.documents})
        ctx.jobs[len(ctx.jobs) - len(checked) :] = checked
        offset = len(state.findings)
        found = [
            Finding(offset + f.id, f.instruction, f.answer, f.explanation, f.source, f.citation, f.job_id)
            for f in found
        ]
        state.findings.extend(found)
        ctx.evidence = [finding_evidence(f, state.chunks[f.job_id]) for f in state.findings]
        if state.findings:
            ctx.best_answer = best_answer(state.findings)
            ctx.citations = _citations(state.findings, [])
        return found

    # -- decide -------------------------------------------------------------------------------------------
    def _decide(self, ctx: RunContext, round_: int, state: _State) -> Decision:
        last = round_ >= ctx.options.max_rounds
        round_jobs = [r for r in ctx.jobs if r.round == round_]
        prompt = render(
            "decide",
            task=ctx.task,
            round=round_,
            max_rounds=ctx.options.max_rounds,
            findings=to_json(digest(state.findings)) if state.findings else "(nothing found)",
            ran=len(round_jobs),
            empty=sum(r.ok and not r.answer for r in round_jobs),
            failed=sum(not r.ok for r in round_jobs),
            last_round=last,
        )
        docs = {d.name: d for d in ctx.documents}

        def check(decision: Decision) -> None:
            if last and decision.decision != "final":
                raise ValueError("this is the last round: reply with decision 'final' and an answer")
            check_plan(decision.jobs, docs)

        with ctx.timed("decide"):
            return ctx.remote.ask([Message("user", prompt)], Decision, step="decide", round=round_, check=check)

    def _finish(self, ctx: RunContext, decision: Decision, findings: list[Finding]) -> None:
        ctx.best_answer = ctx.remote.restore(decision.answer or "")
        ctx.citations = _citations(findings, decision.evidence)


def _citations(findings: Sequence[Finding], evidence: Sequence[int]) -> list[Citation]:
    """The checked citations of the findings the answer rests on (all of them when it names none)."""
    chosen = [f for f in findings if f.id in set(evidence)] or list(findings)
    unique = {(c.document, c.start, c.text): c for f in chosen if (c := f.citation) is not None}
    return list(unique.values())[:MAX_CITATIONS]


def _log_round(ctx: RunContext, round_: int, records: Sequence[JobRecord], decision: Decision) -> None:
    ok = sum(r.ok for r in records)
    instructions = tuple(dict.fromkeys(r.instruction for r in records))
    ctx.round_log.append(RoundRecord(round_, instructions, len(records), ok, decision.decision, decision.feedback))
    emit(ctx.events, RoundDone(round_, ok, len(records) - ok, decision.decision))


def _all_errors(records: Sequence[JobRecord]) -> bool:
    """Whether every job failed in the backend (not by an unusable reply): the local model is down."""
    return all(r.failed_in_backend for r in records)
