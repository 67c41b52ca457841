"""End to end: the real SmolLM2 on llama.cpp as the local model, and a real OpenAI-compatible server (also
serving SmolLM2) as the stand-in remote. The local side must find the evidence (its jobs pick sentences, which a
135M model can do); what the stand-in remote writes is not judged, only its accounting."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from minions.documents import Document, load_document
from minions.protocols import LocalOnly, Minion, Minions, RunResult

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python"),
]

TEXT = """Acme Widgets Annual Report 2023

Acme Widgets sells industrial widgets to factories in Europe and North America. The company employs 1,200
people and runs two plants, one in Ohio and one in Bavaria.

Revenue in fiscal 2023 was $4.2 billion, up 12 percent from $3.75 billion in fiscal 2022. Growth came from
the new line of stainless steel widgets.

Net income was $310 million. The board approved a dividend of $1.10 per share, payable in March 2024.
"""
TASK = "What was Acme's revenue in fiscal 2023?"
OPTIONS = {
    "max_rounds": 1,
    "chunk_size": 400,
    "job_max_tokens": 96,
    "remote_max_tokens": 160,
    "max_retries": 1,
    "max_jobs_per_round": 4,
    "fallback_plan": True,
}
FACT = "Revenue in fiscal 2023 was $4.2 billion, up 12 percent from $3.75 billion in fiscal 2022."
DEMO = Path(__file__).resolve().parents[2] / "examples" / "northwind-annual-report-2025.md"


@pytest.fixture(scope="module")
def local():
    from minions.backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(n_ctx=4096)


@pytest.fixture
def remote(openai_server: str):
    from minions.backends.openai import OpenAIBackend

    return OpenAIBackend(
        "smollm2",
        base_url=openai_server,
        provider="openai",
        context_window=4096,
        timeout=60,
        json_schema_style="json_object",
    )


@pytest.fixture
def doc() -> Document:
    return Document.from_text(TEXT, name="acme.txt")


def assert_no_document_text(egress: str) -> None:
    """The document's paragraphs never leave the device. (What the local model wrote about them does: its
    answers are the digest the remote model reads, and a small model's answer may repeat a phrase.)"""
    flat = " ".join(egress.split())
    for paragraph in TEXT.split("\n\n"):
        if len(paragraph) > 100:
            assert " ".join(paragraph.split()) not in flat


def check_accounting(result: RunResult) -> None:
    assert isinstance(result.answer, str)
    assert result.usage["remote"].calls >= 1 and result.usage["remote"].prompt_tokens > 0
    assert result.egress and all(r.backend.endswith("smollm2") for r in result.egress)
    assert result.remote_only_estimate is not None and result.remote_only_estimate.prompt_tokens > 0
    assert result.timings["total_s"] > 0
    assert result.complete or result.notes


def test_minions_with_real_models(local, remote, doc):
    events = []
    result = Minions(local, remote, **OPTIONS).run(TASK, [doc], events=events.append)

    check_accounting(result)
    egress = "\n".join(r.text for r in result.egress)
    assert_no_document_text(egress)
    # jobs ran (from the stand-in's plan, or the task itself when its plan did not validate) and found the fact
    assert result.jobs and all(j.document == "acme.txt" and j.ok for j in result.jobs)
    assert result.usage["local"].calls >= len(result.jobs) and result.usage["local"].prompt_tokens > 0
    flat = " ".join(TEXT.split())
    assert all(j.citation and j.citation in flat for j in result.jobs)  # picked from the document, word for word
    about_revenue = [j for j in result.jobs if "revenue" in j.instruction.lower()]
    if about_revenue:  # an instruction that asks for it (the task itself, when the stand-in's plan was unusable)
        assert FACT in [j.citation for j in about_revenue], [j.instruction for j in result.jobs]
    assert any(e.kind == "job_finished" for e in events) and events[-1].kind == "final"
    decide = " ".join(r.text for r in result.egress if r.step.startswith("decide"))
    if decide:  # the stand-in was asked to decide: it was shown the quotes the jobs picked
        assert all(j.citation[:100] in decide for j in result.jobs if j.citation)


def test_minion_with_real_models(local, remote, doc):
    result = Minion(local, remote, **OPTIONS).run(TASK, [doc])

    check_accounting(result)
    assert_no_document_text("\n".join(r.text for r in result.egress))
    # the stand-in asked the local model at least once (what a 135M stand-in asks is not judged), and each
    # question was one local call over the whole note
    assert result.jobs and result.usage["local"].calls == len(result.jobs)
    assert all(j.document == "*" and j.raw for j in result.jobs), result.jobs


def test_local_answers_with_the_sentence_that_holds_the_fact(local, doc):
    result = LocalOnly(local, chunk_size=400).run(TASK, [doc])

    assert result.complete and result.egress == () and result.usage["remote"].calls == 0
    assert "$4.2 billion" in result.answer and result.citations[0].text == FACT
    assert result.citations[0].label.startswith("acme.txt line ")
    assert result.evidence[0].kind == "quote" and result.evidence[0].text == FACT
    assert all(j.ok and j.score is not None for j in result.jobs)  # scored through log-probabilities


def test_a_local_model_behind_a_server_on_loopback_is_on_this_device(openai_server, doc):
    """Local reading through the OpenAI SDK and the real server on 127.0.0.1: on this device by its address, so
    nothing is recorded as leaving and nothing is priced."""
    from minions.backends.openai import OpenAIBackend

    local = OpenAIBackend(
        "smollm2", base_url=openai_server, context_window=4096, timeout=60, json_schema_style="json_object"
    )
    result = LocalOnly(local, chunk_size=400).run(TASK, [doc])

    assert local.capabilities.local and result.usage["local"].calls > 0
    assert result.egress == () and result.local_egress is None and result.cost_usd == 0


def test_the_demo_question_is_answered_from_its_sentence(local):
    result = LocalOnly(local).run(
        "What was Northwind's total revenue in 2025, and how did it change from 2024?", [load_document(DEMO)]
    )

    assert "$31.8 million" in result.answer and "$24.6 million" in result.answer
    assert result.citations[0].label.startswith("northwind-annual-report-2025.md line ")


def test_smollm2_asked_to_write_is_checked_and_never_passed_on_unchecked(local):
    """Forced to write (``auto`` quotes for a 135M model), SmolLM2's answer streams, and it stands only where its
    cited quotes state every figure and name in it; else the quote answer, with the figure and its line, replaces
    it and the result says why."""
    from minions.events import AnswerToken, Event
    from minions.protocols.evidence.written import answer_mode, unsupported

    question = "What was Northwind's total revenue in 2025?"
    events: list[Event] = []
    result = LocalOnly(local, answer="write").run(question, [load_document(DEMO)], events=events.append)

    record = result.reading["answer"]
    assert (
        record["mode"] == "write"
        and record["written"] == "".join(e.text for e in events if isinstance(e, AnswerToken)).strip()
    )
    if record["replaced"]:
        assert "$31.8 million" in result.answer and "northwind-annual-report-2025.md, line 27" in result.answer
        assert record["why"] in result.notes[-1]
    else:
        cited = [result.citations[n - 1] for n in record["cited"]]
        assert result.answer == record["written"] and cited
        assert unsupported(result.answer, [question, *(c.text for c in cited), *(c.document for c in cited)]) == []
    assert answer_mode("auto", local) == ("quote", "llamacpp/default has 135M parameters (its model file or server)")


def test_a_written_answer_streams_from_a_local_model_behind_a_server(openai_server, doc):
    """The written answer through the OpenAI SDK's stream from the real server on 127.0.0.1: it comes in pieces,
    and what came is what was checked."""
    from minions.backends.openai import OpenAIBackend
    from minions.events import AnswerToken, Event

    local = OpenAIBackend(
        "smollm2", base_url=openai_server, context_window=4096, timeout=60, json_schema_style="json_object"
    )
    events: list[Event] = []
    result = LocalOnly(local, chunk_size=400, answer="write").run(TASK, [doc], events=events.append)

    pieces = [e.text for e in events if isinstance(e, AnswerToken)]
    record = result.reading["answer"]
    assert len(pieces) > 1 and record["written"] == "".join(pieces).strip()
    assert (result.answer == record["written"]) is (record["replaced"] is False)
    assert result.usage["local"].calls == len(result.jobs) + 1


YES_NO = "Did Northwind's revenue grow in 2025?"
REVENUE = "Total revenue for 2025 was $31.8 million, compared with $24.6 million in 2024, an increase of 29 percent."


def assert_closed_answer(result: RunResult, by: str) -> None:
    """A yes/no answer in its form: "Yes" or "No" (or that the model is not sure), then the quote it rests on."""
    first, rest = result.answer.split("\n", 1)
    choice = result.reading["choice"]
    assert choice["options"] == ["Yes", "No"] and choice["by"] == by and len(choice["picks"]) == 2
    assert first in ("Yes", "No") if not choice["abstained"] else first.startswith("Not sure")
    assert rest.startswith("According to northwind-annual-report-2025.md, line 27:") and REVENUE in rest


def test_a_yes_no_question_is_answered_in_its_form_by_the_embedded_model(local):
    result = LocalOnly(local, choose="scores").run(YES_NO, [load_document(DEMO)])
    assert_closed_answer(result, "scores")
    # read off the question's text, "auto" answers with the quote (RunOptions.choose)
    quoted = LocalOnly(local).run(YES_NO, [load_document(DEMO)])
    assert quoted.answer.startswith("According to") and quoted.reading["choice"]["by"] == "quote"


@pytest.mark.parametrize("choose", ["scores", "schema"])
def test_a_yes_no_question_is_answered_in_its_form_by_a_model_behind_a_server(openai_server, choose):
    """The same path through the OpenAI SDK and llama-cpp-python's server: by log-probabilities where the server
    reports them (its chat template restates the reply's start), else, or when asked, under the JSON schema."""
    from minions.backends.openai import OpenAIBackend

    local = OpenAIBackend(
        "smollm2", base_url=openai_server, context_window=4096, timeout=120, json_schema_style="json_object"
    )
    result = LocalOnly(local, choose=choose).run(YES_NO, [load_document(DEMO)])
    assert_closed_answer(result, "scores" if choose == "scores" and local.capabilities.logprobs else "schema")


REVENUE_OPTIONS = ["Its revenue rose to $31.8 million.", "It appointed a new auditor.", "It opened an office in Oslo."]


def assert_lettered_answer(result: RunResult) -> None:
    """Lettered options given, a 135M model: chosen by their closeness in meaning to its quotes, then the quote."""
    choice = result.reading["choice"]
    assert (choice["by"], choice["picked"], choice["abstained"]) == ("meaning", 0, False)
    first, rest = result.answer.split("\n", 1)
    assert first == f"A: {REVENUE_OPTIONS[0]}" and rest.startswith("According to northwind-annual-report-2025.md")


def test_lettered_options_are_chosen_by_meaning_with_the_embedded_model(local):
    question = "What happened to Northwind's revenue in 2025?"
    result = LocalOnly(local, embeddings="auto").run(question, [load_document(DEMO)], choices=REVENUE_OPTIONS)
    assert_lettered_answer(result)


def test_lettered_options_are_chosen_by_meaning_with_a_model_behind_a_server(openai_server):
    from minions.backends.openai import OpenAIBackend

    local = OpenAIBackend(
        "smollm2", base_url=openai_server, context_window=4096, timeout=120, json_schema_style="json_object"
    )
    question = "What happened to Northwind's revenue in 2025?"
    result = LocalOnly(local, embeddings="auto").run(question, [load_document(DEMO)], choices=REVENUE_OPTIONS)
    assert_lettered_answer(result)


OTHER_WORDS = "What did the storm break?"
"""Shares no word but "the" with line 19 of the demo report: "A hailstorm on 14 June damaged 1,150 panels ..."."""


def assert_answered_in_other_words(result: RunResult) -> None:
    """The sentences the model read, and the quotes it picked, ordered by their closeness in meaning too
    (all-MiniLM-L6-v2 on this device): the quote that answers comes first."""
    assert "line 19" in result.answer and "damaged 1,150 panels" in result.answer


def test_a_question_in_other_words_is_answered_from_the_sentence_that_means_it(local):
    result = LocalOnly(local, embeddings="auto").run(OTHER_WORDS, [load_document(DEMO)])
    assert_answered_in_other_words(result)


def test_a_question_in_other_words_is_answered_by_a_model_behind_a_server(openai_server):
    from minions.backends.openai import OpenAIBackend

    local = OpenAIBackend(
        "smollm2", base_url=openai_server, context_window=4096, timeout=120, json_schema_style="json_object"
    )
    assert_answered_in_other_words(LocalOnly(local, embeddings="auto").run(OTHER_WORDS, [load_document(DEMO)]))
