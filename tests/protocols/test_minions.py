"""Minions against scripted backends: every branch of plan, dispatch, aggregate and decide."""

from __future__ import annotations

import json

import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.errors import BackendConnectionError, ModelOutputError
from minions.events import (
    CancelToken,
    Event,
    FinalAnswer,
    JobFailed,
    JobFinished,
    JobStarted,
    Notice,
    PlanReady,
    RoundDone,
)
from minions.protocols import Budget, InputError, Minions, RunOptions
from minions.types import Message, SamplingParams

from .helpers import FACT, SECRET, final, job_reply, more, plan


def run(local, remote, doc, *replies, task="What was revenue in fiscal 2023?", **options):
    remote.enqueue(*replies)
    events: list[Event] = []
    result = Minions(local, remote, **options).run(task, [doc], events=events.append)
    return result, events


def test_one_round_answers_with_checked_citations_and_accounts_for_everything(local, remote, doc):
    result, events = run(local, remote, doc, plan(), final(evidence=(1,)))

    assert result.complete and result.answer == "Revenue was $4.2 billion."
    assert result.rounds == 1 and len(result.jobs) == len(local.history) > 3
    assert [c.text for c in result.citations] == [FACT]
    cite = result.citations[0]
    assert cite.document == "report.txt" and doc.text[cite.start : cite.end] == cite.text
    assert result.usage["local"].calls == len(result.jobs) and result.usage["remote"].calls == 2
    assert result.usage["remote"].cost_usd > 0  # priced from the table as gpt-4o-mini
    assert result.remote_only_estimate.prompt_tokens > result.usage["remote"].prompt_tokens
    assert {"total_s", "plan_s", "local_s", "decide_s"} <= set(result.timings)
    kinds = [e.kind for e in events]
    assert kinds[0] == "plan_ready" and kinds[-2:] == ["round_done", "final"]
    assert sum(isinstance(e, JobFinished) for e in events) == len(result.jobs)
    assert isinstance(events[-1], FinalAnswer) and events[-1].answer == result.answer


def test_egress_is_exactly_what_the_remote_model_received_and_never_the_chunks(local, remote, doc):
    result, _ = run(local, remote, doc, plan(), final())

    sent = [m.content for call in remote.history for m in call.messages]
    assert [r.text for r in result.egress] == sent
    assert all(r.backend == "scripted/gpt-4o-mini" for r in result.egress)
    egress = "\n".join(r.text for r in result.egress)
    assert SECRET not in egress and "Paragraph 3." not in egress
    assert "$4.2 billion" in egress  # the finding, not the chunk
    assert [r.step for r in result.egress] == ["plan:user", "decide:user"]


def test_job_prompts_put_the_shared_prefix_first_and_ask_for_the_schema(local, remote, doc):
    run(local, remote, doc, plan(), final())

    calls = local.history
    systems = {c.messages[0].content for c in calls}
    assert len(systems) == 1 and all(c.messages[0].role == "system" for c in calls)
    users = [c.messages[1].content for c in calls]
    assert all(u.startswith("Excerpt (report.txt") for u in users)  # the chunk first: a prefix jobs can share
    assert all("\nQuestion: Find the revenue for fiscal 2023.\n" in u for u in users)
    # the schema offers the chunk's own sentences, so the quote is verbatim by construction
    for call in calls:
        quotes = [a["properties"]["quote"]["const"] for a in call.params.json_schema["anyOf"]]
        assert quotes[-1] == "none" and all(q in " ".join(call.messages[1].content.split()) for q in quotes[:-1])
    assert any(FACT in [a["properties"]["quote"]["const"] for a in c.params.json_schema["anyOf"]] for c in calls)


def test_no_schema_for_a_backend_that_cannot_follow_one(remote, doc):
    local = ScriptedBackend("scripted/plain", responder=job_reply, capabilities=Capabilities(local=True))
    result, _ = run(local, remote, doc, plan(), final())
    assert result.complete and all(c.params.json_schema is None for c in local.history)


def test_a_plan_that_fails_validation_goes_back_with_the_error(local, remote, doc):
    result, _ = run(local, remote, doc, "I think we should read it all.", json.dumps({"jobs": []}), plan(), final())

    assert result.complete and result.answer
    plan_calls = remote.history[:3]
    assert [len(c.messages) for c in plan_calls] == [1, 3, 5]
    assert "no valid JSON object" in plan_calls[1].messages[-1].content
    assert "jobs" in plan_calls[2].messages[-1].content and "at least 1" in plan_calls[2].messages[-1].content
    assert [r.step for r in result.egress][:3] == ["plan:user", "plan-retry1:user", "plan-retry1:assistant"]


def test_a_plan_naming_unknown_documents_goes_back(local, remote, doc):
    bad = plan({"instruction": "Find revenue.", "scope": "all", "documents": ["other.pdf"]})
    result, _ = run(local, remote, doc, bad, plan(), final())
    assert result.complete
    assert "unknown document 'other.pdf'" in remote.history[1].messages[-1].content


def test_a_plan_that_never_validates_returns_a_partial_result(local, remote, doc):
    result, _ = run(local, remote, doc, "no", "still no", "nope", max_retries=2)

    assert not result.complete and result.jobs == () and not local.history
    assert "ModelOutputError" in result.notes[0] and "3 attempts" in result.notes[0]


def test_a_decision_that_never_validates_keeps_the_finished_jobs(local, remote, doc):
    result, _ = run(local, remote, doc, plan(), "x", "y", "z")

    assert not result.complete and "ModelOutputError" in result.notes[0]
    assert result.jobs and result.answer == "$4.2 billion"  # the answer the jobs agree on
    assert result.citations


def test_a_failed_job_is_retried_once(remote, doc):
    failures = {"left": 1}

    def flaky(messages: list[Message], params: SamplingParams):
        if "Revenue in fiscal 2023" in messages[-1].content and failures["left"]:
            failures["left"] -= 1
            return BackendConnectionError("connection reset")
        return job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=flaky)
    result, events = run(local, remote, doc, plan(), final())

    hit = [j for j in result.jobs if j.answer]
    assert len(hit) == 1 and hit[0].attempts == 2 and hit[0].ok
    retry = [e for e in events if isinstance(e, JobFailed)]
    assert len(retry) == 1 and retry[0].will_retry and "connection reset" in retry[0].error
    fact_calls = [c for c in local.history if "Revenue in fiscal 2023" in c.prompt]
    assert [c.params.temperature > 0 for c in fact_calls] == [False, True]  # not the same greedy decode again


def test_a_malformed_job_fails_after_one_retry_and_the_run_goes_on(remote, doc):
    def junk_on_fact(messages: list[Message], params: SamplingParams) -> str:
        return "I am not sure." if "Revenue in fiscal 2023" in messages[-1].content else job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=junk_on_fact)
    result, events = run(local, remote, doc, plan(), final("Not found."))

    bad = [j for j in result.jobs if not j.ok]
    assert len(bad) == 1 and bad[0].attempts == 2 and "malformed" in bad[0].error
    assert bad[0].raw == "I am not sure."
    assert result.complete and result.answer == "Not found."
    assert [e.will_retry for e in events if isinstance(e, JobFailed)] == [True, False]
    decide = remote.history[-1].messages[0].content
    assert "1 failed" in decide


def test_sloppy_json_from_a_small_model_still_counts(remote, doc):
    def sloppy(messages: list[Message], params: SamplingParams) -> str:
        if "Revenue in fiscal 2023" in messages[-1].content:
            return 'Sure! ```json\n{"quote": "REVENUE in  fiscal 2023 was $4.2 billion", "answer": "4.2"}``` ok'
        return '{"quote": "None", "answer": null}'

    local = ScriptedBackend("scripted/local", responder=sloppy)
    result, _ = run(local, remote, doc, plan(), final())

    answered = [j for j in result.jobs if j.answer]
    # the quote is near-verbatim, so it counts; "4.2" is not a figure of it as written, so the quote is the answer
    assert [j.citation for j in answered] == ["REVENUE in  fiscal 2023 was $4.2 billion"]
    assert answered[0].answer == answered[0].citation and answered[0].citation_verified
    assert all(j.ok for j in result.jobs)


def test_a_made_up_citation_is_flagged_and_dropped(remote, doc):
    def liar(messages: list[Message], params: SamplingParams) -> str:
        if "Revenue in fiscal 2023" in messages[-1].content:
            return json.dumps({"quote": "Revenue was nine trillion dollars", "answer": "9T"})
        return job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=liar)
    result, _ = run(local, remote, doc, plan(), final())

    job = next(j for j in result.jobs if "nine trillion" in j.raw)
    assert not job.ok and "not in the excerpt" in (job.error or "") and job.attempts == 2
    assert result.citations == ()
    decide = remote.history[-1].messages[0].content
    assert "nine trillion" not in decide and "9T" not in decide  # neither the quote nor its answer went out


def test_a_dead_local_backend_ends_the_run_with_what_it_has(remote, doc):
    local = ScriptedBackend("scripted/local", responder=lambda m, p: BackendConnectionError("server gone"))
    result, _ = run(local, remote, doc, plan(), final())

    assert not result.complete and all(not j.ok and j.attempts == 2 for j in result.jobs)
    assert all(isinstance(j.exception, BackendConnectionError) and j.failed_in_backend for j in result.jobs)
    assert "failed" in result.notes[0] and "server gone" in result.notes[0]
    assert len(remote.history) == 1  # no decision was asked for


def test_a_local_model_whose_every_reply_is_unusable_is_up_and_the_remote_decides(remote, doc):
    # Replies that loop or are not JSON are the model's failures, typed ModelOutputError: the model is up, so the
    # run goes on to a decision instead of stopping as if the local model were down.
    replies = iter(["I am not sure.", '{"quote": "' + "the year 2024 was " * 12] * 100)
    local = ScriptedBackend("scripted/local", responder=lambda m, p: next(replies))
    result, _ = run(local, remote, doc, plan(), final("Not found."))

    assert result.jobs and not any(j.ok for j in result.jobs)
    assert all(isinstance(j.exception, ModelOutputError) and not j.failed_in_backend for j in result.jobs)
    assert {"malformed", "degenerate"} <= {(j.error or "").split()[0] for j in result.jobs}
    assert result.complete and result.answer == "Not found." and len(remote.history) == 2


def test_a_local_backend_whose_batch_raises_fails_its_jobs_not_the_run(remote, doc):
    class Broken(ScriptedBackend):
        def batch(self, requests, *, on_result=None, cancel=None):
            raise BackendConnectionError("engine crashed")

    result, _ = run(Broken("scripted/broken"), remote, doc, plan(), final())
    assert not result.complete and result.jobs and all("engine crashed" in j.error for j in result.jobs)


def test_several_rounds_carry_feedback_and_new_jobs(local, remote, doc):
    result, events = run(local, remote, doc, plan(), more(), final("Done."), max_rounds=3)

    assert result.complete and result.rounds == 2 and result.answer == "Done."
    assert [r.decision for r in result.round_log] == ["continue", "final"]
    assert result.round_log[0].feedback == "Need the segment split."
    round2 = [j for j in result.jobs if j.round == 2]
    assert round2 and all(j.instruction == "Find the segment revenue." for j in round2)
    assert len(round2) <= RunOptions().top_k  # the chunks a retrieval scope reads
    assert [e.round for e in events if isinstance(e, RoundDone)] == [1, 2]
    assert len({j.job_id for j in result.jobs}) == len(result.jobs)


def test_the_last_round_must_end_with_an_answer(local, remote, doc):
    result, _ = run(local, remote, doc, plan(), more(), final(), max_rounds=1)

    assert result.complete and result.rounds == 1
    assert "last round" in remote.history[-1].messages[-1].content


def test_a_token_budget_stops_the_run_with_its_best_answer(local, remote, doc):
    remote.enqueue(plan())
    plan_cost = None

    def watch(event: Event) -> None:
        nonlocal plan_cost
        if isinstance(event, PlanReady):
            plan_cost = True

    result = Minions(local, remote, budget=Budget(max_remote_tokens=400)).run(
        "What was revenue in fiscal 2023?", [doc], events=watch
    )

    assert plan_cost and not result.complete
    assert "budget" in result.notes[0] and result.answer == "$4.2 billion"
    assert len(remote.history) == 1 and result.usage["remote"].total_tokens <= 400
    assert len(result.egress) == 1  # the refused decision never left


def test_a_dollar_budget_also_stops(local, remote, doc):
    remote.enqueue(plan())
    result = Minions(local, remote, budget=Budget(max_remote_usd=1e-5)).run("What was revenue?", [doc])
    assert not result.complete and "$" in result.notes[0] and len(remote.history) <= 1


@pytest.mark.parametrize("budget", [{"max_remote_tokens": 0}, {"max_remote_usd": 0.0}])
def test_a_zero_budget_is_an_error_before_anything_is_sent(local, remote, budget):
    with pytest.raises(InputError, match="allows no remote call"):
        Minions(local, remote, budget=Budget(**budget))
    assert not remote.history and isinstance(InputError("x"), ValueError)


def test_cancellation_stops_the_batch_and_keeps_finished_jobs(local, remote, doc):
    cancel = CancelToken()
    remote.enqueue(plan())
    finished = []

    def sink(event: Event) -> None:
        if isinstance(event, JobFinished):
            finished.append(event)
            cancel.cancel()

    result = Minions(local, remote, batch_size=2).run("What was revenue?", [doc], events=sink, cancel=cancel)

    assert not result.complete and "Cancelled" in result.notes[0]
    assert len(local.history) == 1  # the cancel reached the backend inside the batch: the second job never ran
    assert [j.ok for j in result.jobs] == [True, False] and "cancelled" in (result.jobs[1].error or "")
    assert len(remote.history) == 1


def test_cancellation_reaches_inside_a_batch_and_nothing_is_retried(local, remote, doc):
    cancel = CancelToken()
    remote.enqueue(plan())

    def sink(event: Event) -> None:
        if isinstance(event, JobStarted) and event.job_id == 0:
            return
        if isinstance(event, JobStarted):
            cancel.cancel()

    result = Minions(local, remote).run("What was revenue?", [doc], events=sink, cancel=cancel)

    assert not result.complete and "Cancelled" in result.notes[0]
    assert len(local.history) == 0  # cancelled while the jobs were being started: none ran
    assert result.jobs and all(not j.ok and j.attempts == 1 and "cancelled" in (j.error or "") for j in result.jobs)


def test_jobs_and_scores_over_one_chunk_share_their_prompt_prefix():
    from minions.chunking import Chunk
    from minions.protocols.evidence.jobs import job_messages, job_request
    from minions.types import SamplingParams

    chunk = Chunk("d.txt", 0, "Revenue was $4.2 billion. " * 40, 0, 1040)
    quote = job_messages("What was revenue?", chunk)
    score = job_messages("What was revenue?", chunk, ask="label")
    other = job_messages("What was the margin?", chunk)
    assert quote[0] == score[0] == other[0]  # one system prompt
    shared = quote[1].content[: quote[1].content.index("Question:")]
    assert shared.startswith("Excerpt (d.txt") and "\n[A] Revenue was $4.2 billion.\n[B] Revenue" in shared
    assert score[1].content.startswith(shared) and other[1].content.startswith(shared)
    assert quote[1].content != score[1].content
    assert score[-1].role == "assistant" and len(quote) == 2  # a scored job's reply starts before the label
    request = job_request("What was revenue?", chunk, SamplingParams())
    assert request.prefix is not None and quote[1].content[: request.prefix.chars] == shared.rstrip()


def test_too_many_jobs_fall_back_to_retrieval_with_a_notice(local, remote, doc):
    result, events = run(local, remote, doc, plan(samples=1), final(), max_jobs_per_round=2)

    assert len(result.jobs) == 2
    assert any(j.answer == "$4.2 billion" for j in result.jobs)  # BM25 found the chunk with the fact
    notices = [e for e in events if isinstance(e, Notice)]
    assert notices and "BM25" in notices[0].message


def test_samples_multiply_jobs_and_vary_the_seed(local, remote, doc):
    result, _ = run(
        local,
        remote,
        doc,
        plan({"instruction": "Find revenue.", "scope": "retrieve", "query": "revenue 2023"}, samples=2),
        final(),
    )
    assert len(result.jobs) == 2 * RunOptions().top_k and {j.sample for j in result.jobs} == {0, 1}
    assert len({c.params.seed for c in local.history}) == 2


def test_page_and_section_scopes_pick_their_chunks(local, remote, paged_doc):
    scoped = plan({"instruction": "Find revenue.", "scope": "pages", "pages": [[4, 4]]}, chunk_size=300)
    result, _ = run(local, remote, paged_doc, scoped, final())
    assert result.jobs and all(4 in j.pages for j in result.jobs)
    assert result.citations[0].pages == (4,)


def test_sections_scope(local, remote):
    text = "# Overview\n\n" + "General words here. " * 60 + "\n\n# Financial Results\n\n" + FACT + " More." * 40
    doc = Document.from_text(text, name="notes.md")
    assert [s.title for s in doc.sections] == ["Overview", "Financial Results"]
    scoped = plan(
        {"instruction": "Find revenue.", "scope": "sections", "sections": ["financial results"]}, chunk_size=300
    )
    result, _ = run(local, remote, doc, scoped, final())
    section = doc.sections[1]
    assert result.jobs and any(j.answer for j in result.jobs)
    assert len(result.jobs) <= (len(doc.text) - section.start) // 300 + 2


def test_pages_scope_on_a_document_without_pages_goes_back(local, remote, doc):
    bad = plan({"instruction": "Find revenue.", "scope": "pages", "pages": [[1, 2]]})
    result, _ = run(local, remote, doc, bad, plan(), final())
    assert result.complete and "no pages" in remote.history[1].messages[-1].content


def test_a_job_cut_off_by_max_tokens_keeps_its_answer(remote, doc):
    def rambling(messages: list[Message], params: SamplingParams) -> str:
        if "Revenue in fiscal 2023" in messages[-1].content:
            return '{"quote": "Revenue in fiscal 2023 was $4.2 billion, up 12 percent.", "answer": "$4.2 bil'
        return job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=rambling, capabilities=Capabilities(local=True))
    result, _ = run(local, remote, doc, plan(), final())
    job = next(j for j in result.jobs if j.answer)
    assert job.ok and job.attempts == 1 and job.citation == FACT and job.citation_verified
    assert job.answer == FACT  # the cut answer is not a figure of the quote: the quote stands


def test_with_fallback_plan_a_planner_that_never_validates_still_gets_jobs_run(local, remote, doc):
    result, events = run(local, remote, doc, "no", "no", final(), max_retries=1, fallback_plan=True)
    assert (
        result.complete
        and result.jobs
        and all(j.instruction == "What was revenue in fiscal 2023?" for j in result.jobs)
    )
    assert any(isinstance(e, Notice) and "No usable plan" in e.message for e in events)


def test_a_job_that_loops_is_failed_not_passed_on(remote, doc):
    def looping(messages: list[Message], params: SamplingParams) -> str:
        if "Revenue in fiscal 2023" in messages[-1].content:
            return '{"quote": "' + "the year 2024 was " * 12
        return job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=looping, capabilities=Capabilities(local=True))
    result, _ = run(local, remote, doc, plan(), final("Not found."))
    bad = [j for j in result.jobs if not j.ok]
    assert len(bad) == 1 and "repeating itself" in (bad[0].error or "") and bad[0].attempts == 2
    assert "the year 2024" not in remote.history[-1].messages[0].content
