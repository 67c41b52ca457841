"""The written answer of ``local``: the rule that chooses it, the check that keeps it faithful to its quotes, and
the run that streams it (scripted local models; the real SmolLM2 in ``test_e2e``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from minions.backends.scripted import ScriptedBackend
from minions.errors import BackendConnectionError
from minions.events import AnswerToken, CancelToken, Event
from minions.protocols import LocalOnly
from minions.protocols.evidence.written import answer_mode, check_written, unsupported
from minions.protocols.options import InputError, RunOptions
from minions.protocols.prompts import render
from minions.protocols.result import Citation
from minions.types import Message, SamplingParams

from ..helpers import FACT, job_reply

QUESTION = "What was revenue in fiscal 2023?"
REPORT = [
    "Total revenue for 2025 was $31.8 million, compared with $24.6 million in 2024, an increase of 29 percent.",
    "northwind-annual-report-2025.md",
]


# -- the check -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer",
    [
        "Northwind's revenue was $31.8 million in 2025, up 29% from $24.6 million in 2024 [1].",
        "Revenue rose 29 percent to 31.8 million [1].",
        "Total revenue was $31,800,000 [1].",
        "According to the report, the increase was 29 % [1].",
    ],
)
def test_a_paraphrase_with_the_quotes_figures_and_names_is_supported(answer):
    assert unsupported(answer, [*REPORT, "What was Northwind's revenue?"]) == []


@pytest.mark.parametrize(
    ("answer", "missing"),
    [
        ("Revenue was $42 million in 2025 [1].", ["$42 million"]),
        ("Revenue grew 31 percent [1].", ["31 percent"]),
        ("Revenue was $24.6 billion [1].", ["$24.6 billion"]),  # the quote's number, at another scale
        ("Contoso Energy reported $31.8 million [1].", ["Contoso", "Energy"]),
        ("Contoso's revenue was $31.8 million [1].", ["Contoso"]),
        ("Revenue was $31.8 million, said Ingrid Hallvard [1].", ["Ingrid", "Hallvard"]),
        ("Revenue was $31.8 million. EBITDA was not given [1].", ["EBITDA"]),
    ],
)
def test_a_figure_or_a_name_the_quotes_do_not_state_is_found(answer, missing):
    assert unsupported(answer, REPORT) == missing


def test_a_scaled_figure_needs_a_figure_of_that_size_not_its_bare_number():
    assert unsupported("The cost was $42 million [1].", ["The plant has 42 staff."]) == ["$42 million"]
    assert unsupported("The plant has 42 staff [1].", ["The cost was $42 million."]) == []


def test_a_word_capitalised_only_because_it_starts_a_sentence_is_no_name():
    assert (
        unsupported("Costs were $25.1 million [1]. Sales rose too.", ["Operating expenses were $25.1 million."]) == []
    )


def cite(*texts: str) -> list[Citation]:
    return [Citation(t, "report.txt", i, line=10 + i) for i, t in enumerate(texts)]


def test_the_check_reads_only_the_quotes_the_answer_cites():
    quotes = cite("Revenue was $4.2 billion.", "The company has 300 staff in Ostrava.")
    assert check_written("Revenue was $4.2 billion [1].", quotes).ok
    kept = check_written("Revenue was $4.2 billion [1] and it has 300 staff in Ostrava [2].", quotes)
    assert kept.ok and kept.cited == (1, 2)
    wrong = check_written("Revenue was $4.2 billion; it has 300 staff [1].", quotes)
    assert wrong.why == "'300' is not in the quotes it cites"


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("", "it wrote nothing"),
        ("Revenue was $4.2 billion.", "it cites none of the quotes"),
        ("Revenue was $4.2 billion [3].", "it cites [3], and there were 1 quotes"),
    ],
)
def test_an_answer_that_cites_nothing_or_what_was_not_shown_does_not_stand(answer, why):
    assert check_written(answer, cite("Revenue was $4.2 billion.")).why == why


# -- the rule --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "parameters", "mode"),
    [
        ("llamacpp/default", 134_515_008, "quote"),  # the embedded SmolLM2-135M
        ("ollama/llama3.2", 3_212_749_888, "write"),
        ("ollama/llama3.2:3b", None, "write"),  # the server did not say: the name does
        ("openai-compatible/SmolLM2-135M-Instruct", None, "quote"),
        ("openai-compatible/local-model", None, "quote"),  # unknown: quote
    ],
)
def test_auto_writes_from_a_billion_parameters(name, parameters, mode):
    chosen, because = answer_mode("auto", ScriptedBackend(name, parameters=parameters))
    assert chosen == mode and name in because


def test_an_asked_mode_wins_over_the_size():
    assert answer_mode("write", ScriptedBackend(parameters=100))[0] == "write"
    assert answer_mode("quote", ScriptedBackend(parameters=8 * 10**9))[0] == "quote"
    with pytest.raises(InputError, match="answer must be one of auto, write, quote"):
        RunOptions(answer="essay")  # type: ignore[arg-type]


# -- the run ---------------------------------------------------------------------------------------------------
def writer(text: str, parameters: int | None = 3 * 10**9) -> ScriptedBackend:
    """A local model that finds the revenue fact in its jobs and writes ``text`` when asked to answer."""

    def reply(messages: list[Message], params: SamplingParams) -> str:
        if messages[0].content == render("written_system"):
            return text
        return job_reply(messages, params)

    return ScriptedBackend("scripted/local", responder=reply, parameters=parameters)


def test_a_faithful_written_answer_stands_cites_its_quotes_and_streams(doc):
    local = writer("Revenue in fiscal 2023 was $4.2 billion, up 12 percent [1].")
    events: list[Event] = []
    result = LocalOnly(local).run(QUESTION, [doc], events=events.append)

    assert result.answer == "Revenue in fiscal 2023 was $4.2 billion, up 12 percent [1]."
    assert result.citations[0].text == FACT and result.citations[0].label.startswith("report.txt line ")
    assert result.reading["answer"] == {
        "mode": "write",
        "because": "scripted/local has 3.0B parameters (its model file or server)",
        "written": result.answer,
        "cited": [1],
        "replaced": False,
        "why": None,
    }
    assert "".join(e.text for e in events if isinstance(e, AnswerToken)) == result.answer
    prompt = local.history[-1].messages[-1].content  # the quotes, numbered, with their places
    assert f"[1] ({result.citations[0].label}) {FACT}" in prompt and QUESTION in prompt
    assert result.usage["local"].calls == len(result.jobs) + 1 and not result.notes


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("Revenue in fiscal 2023 was $4.9 billion [1].", "'$4.9 billion' is not in the quotes it cites"),
        ("Revenue of $4.2 billion went to Contoso [1].", "'Contoso' is not in the quotes it cites"),
    ],
)
def test_a_written_answer_that_states_what_its_quotes_do_not_is_replaced(doc, written, why):
    result = LocalOnly(writer(written)).run(QUESTION, [doc])

    assert result.answer.startswith("$4.2 billion, according to report.txt, line ") and FACT in result.answer
    assert result.reading["answer"]["replaced"] and result.reading["answer"]["why"] == why
    assert result.reading["answer"]["written"] == written
    assert result.notes == (f"The local model's written answer was replaced by the quote answer: {why}.",)


def test_a_small_model_quotes_without_being_asked_to_write(doc):
    local = writer("never asked", parameters=135_000_000)
    result = LocalOnly(local).run(QUESTION, [doc])

    assert result.answer.startswith("$4.2 billion, according to") and result.reading["answer"]["mode"] == "quote"
    assert all(call.messages[0].content != render("written_system") for call in local.history)


def test_a_model_that_fails_while_writing_leaves_the_quote_answer(doc):
    def reply(messages: list[Message], params: SamplingParams) -> str | BaseException:
        if messages[0].content == render("written_system"):
            return BackendConnectionError("connection reset", backend="scripted/local")
        return job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=reply)  # type: ignore[arg-type]
    result = LocalOnly(local, answer="write").run(QUESTION, [doc])

    assert result.complete and result.error is None and result.answer.startswith("$4.2 billion, according to")
    assert "failed while writing (connection reset)" in result.reading["answer"]["why"]


def test_a_run_cancelled_while_the_answer_is_written_keeps_the_quote_answer(doc):
    cancel = CancelToken()

    def sink(event: Event) -> None:
        if isinstance(event, AnswerToken):
            cancel.cancel()

    result = LocalOnly(writer("Revenue in fiscal 2023 was $4.2 billion [1].")).run(
        QUESTION, [doc], events=sink, cancel=cancel
    )
    assert not result.complete and result.answer.startswith("$4.2 billion, according to")
    assert "replaced" not in result.reading["answer"]  # it was never checked, and never passed on


def test_a_written_answer_that_loops_is_cut_where_it_begins_to_and_replaced(doc):
    class WordByWord(ScriptedBackend):
        closed = False

        def stream(self, messages: Any, params: SamplingParams | None = None) -> Iterator[str]:
            try:
                for word in self.chat(messages, params).text.split(" "):
                    yield word + " "
            finally:
                self.closed = True

    loop = "Revenue was $4.2 billion [1]. " + "The revenue was revenue, " * 40
    local = WordByWord("scripted/llama3.2:3b", responder=writer(loop).responder)
    events: list[Event] = []
    result = LocalOnly(local).run(QUESTION, [doc], events=events.append)

    assert result.reading["answer"]["why"] == "it repeats itself" and local.closed
    assert result.answer.startswith("$4.2 billion, according to report.txt")
    assert len([e for e in events if isinstance(e, AnswerToken)]) < 30  # of 165 words


def test_the_speculative_bench_writes_from_the_excerpts_figures() -> None:
    """``minions bench speculative --settings written``: each job is the written answer's own prompt over the
    spans of an excerpt with the most figures, in the excerpt's order, and the CLI hands that prompt to the bench."""
    from minions.evals.bench.speculative import SpecBenchConfig, _jobs
    from minions.protocols.evidence.written import excerpt_messages

    excerpt = (
        "Net sales were $32.8 billion in 2018, up 3.5 percent. The company is based in Minnesota. Operating income "
        "was $7.2 billion. We grew in every region. Cash was $3.3 billion at year end."
    )
    system, user = excerpt_messages(excerpt, "What were net sales?")
    assert system.content == render("written_system")
    quoted = [line for line in user.content.splitlines() if line.startswith("[")]
    assert quoted == [
        "[1] (excerpt) Net sales were $32.8 billion in 2018, up 3.5 percent.",
        "[2] (excerpt) Operating income was $7.2 billion.",
        "[3] (excerpt) Cash was $3.3 billion at year end.",
    ]
    assert user.content.endswith("Question: What were net sales?")
    config = SpecBenchConfig(settings=("written",), prompts=(("written", excerpt_messages),), max_tokens=40)
    jobs = _jobs("written", [excerpt], config)
    assert [j.messages[0].content for j in jobs] == [system.content] * config.jobs_per_chunk
    assert all("[1] (excerpt) Net sales" in j.messages[1].content for j in jobs)
    assert all(j.params.max_tokens == 40 for j in jobs)
