"""Minion: a conversation. The local model holds the whole context; the remote model, which never sees it,
asks it questions for up to ``max_rounds`` rounds and then gives the final answer."""

from __future__ import annotations

import logging
from typing import ClassVar

from pydantic import ValidationError

from minions.errors import ModelOutputError
from minions.types import ChatResult, Message, SamplingParams

from .base import BaseProtocol, describe_documents, fit_to_tokens, verified_citations
from .channel import priced
from .context import RunContext
from .evidence.jobs import looping
from .parsing import extract_json
from .prompts import render
from .result import JobRecord, RoundRecord
from .schemas import JOB_OUTPUT_SCHEMA, JobOutput, MinionTurn

__all__ = ["Minion"]

log = logging.getLogger(__name__)

PROMPT_RESERVE = 256
"""Tokens of the local prompt that are not the context (instructions, the question)."""


class Minion(BaseProtocol):
    name: ClassVar[str] = "minion"

    def _run(self, ctx: RunContext) -> None:
        context = self._local_context(ctx)
        history = [
            Message(
                "user",
                render(
                    "minion_remote",
                    task=ctx.task,
                    max_rounds=ctx.options.max_rounds,
                    documents=describe_documents(ctx.documents),
                ),
            )
        ]
        for round_ in range(1, ctx.options.max_rounds + 2):
            turn = self._ask_remote(ctx, history, round_)
            if turn.decision == "final":
                ctx.best_answer = ctx.remote.restore(turn.answer or "")
                return
            question = ctx.remote.restore(turn.message or "")
            ctx.rounds = round_
            record = self._ask_local(ctx, context, question, round_)
            ctx.round_log.append(RoundRecord(round_, (question,), 1, int(record.ok), "ask"))
            reply = record.answer or record.explanation or "(no answer)"
            if record.citation and record.citation_verified:
                reply += f'\nQuote: "{record.citation}"'
            history += [
                Message("assistant", turn.model_dump_json(exclude_none=True)),
                Message("user", render("minion_reply", reply=reply, last_round=round_ >= ctx.options.max_rounds)),
            ]

    def _local_context(self, ctx: RunContext) -> str:
        text = "\n\n".join(f"# {d.name}\n{d.text}" for d in ctx.documents)
        limit = ctx.local.capabilities.context_window - ctx.options.job_max_tokens - PROMPT_RESERVE
        context, cut = fit_to_tokens(text, ctx.local, limit)
        if cut:
            ctx.notice(
                f"The documents exceed the local model's context: it reads the first {len(context)} of "
                f"{len(text)} characters. Use Minions for long documents."
            )
        return context

    def _ask_remote(self, ctx: RunContext, history: list[Message], round_: int) -> MinionTurn:
        last = round_ > ctx.options.max_rounds

        def check(turn: MinionTurn) -> None:
            if last and turn.decision != "final":
                raise ValueError("no questions left: reply with decision 'final' and an answer")

        with ctx.timed("remote"):
            return ctx.remote.ask(
                history, MinionTurn, step="ask", round=min(round_, ctx.options.max_rounds), check=check
            )

    def _ask_local(self, ctx: RunContext, context: str, question: str, round_: int) -> JobRecord:
        params = SamplingParams(max_tokens=ctx.options.job_max_tokens)
        if ctx.local.capabilities.json_schema:
            params = params.with_(json_schema=JOB_OUTPUT_SCHEMA)
        messages = [Message("system", render("minion_local", context=context)), Message("user", question)]
        ctx.check_cancelled()
        with ctx.timed("local"):
            result = ctx.local.chat(messages, params)
        ctx.meter.add("local", priced(ctx.local, result.usage, ctx.options.price_table))
        record = _record(len(ctx.jobs), round_, question, result)
        if record.citation:
            found = verified_citations([record.citation], ctx.documents)
            record = JobRecord(**{**record.__dict__, "citation_verified": bool(found)})
            ctx.citations.extend(found)
        ctx.jobs.append(record)
        if record.answer:
            ctx.best_answer = record.answer
        return record


def _record(job_id: int, round_: int, question: str, result: ChatResult) -> JobRecord:
    """The local reply as a job record; a reply that is not JSON still counts, as plain text."""
    try:
        out = JobOutput.model_validate(extract_json(result.text))
        answer, explanation, citation, error = out.answer, out.explanation, out.citation, None
    except (ValueError, ValidationError):
        answer, explanation, citation = result.text.strip()[:1000] or None, "", None
        error = None if answer else "empty reply"
    if looping(result):  # a reply that loops is junk, whatever it began with
        answer, explanation, citation = None, "", None
        error = "degenerate reply: it started repeating itself and was cut"
    return JobRecord(
        job_id=job_id,
        round=round_,
        instruction=question,
        document="*",
        chunk=0,
        pages=(),
        attempts=1,
        ok=answer is not None or bool(explanation),
        answer=answer,
        explanation=explanation,
        citation=citation,
        error=error,
        raw=result.text[:2000],
        exception=ModelOutputError(error, raw=result.text) if error else None,
    )
