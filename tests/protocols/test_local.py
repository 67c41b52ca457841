"""LocalOnly: the local model answers with the quote that holds the fact, and nothing leaves the device."""

from __future__ import annotations

import json
import re

import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend, ScriptedCall
from minions.protocols import LocalOnly
from minions.types import ChatRequest, ChatResult, Timings, Usage

from .helpers import FACT, job_reply


def test_local_only_answers_with_the_quote_and_its_place_on_the_device(local, doc):
    result = LocalOnly(local).run("What was revenue in fiscal 2023?", [doc])
    assert result.complete and result.egress == () and result.usage["remote"].calls == 0
    line = doc.text[: doc.text.index(FACT)].count("\n") + 1
    assert result.answer == f"$4.2 billion, according to report.txt, line {line}:\n\u201c{FACT}\u201d"
    assert [c.text for c in result.citations] == [FACT] and result.citations[0].label == f"report.txt line {line}"
    assert result.citations[0].start == doc.text.index(FACT)
    assert result.usage["local"].calls == len(result.jobs)


def test_local_only_reads_the_best_chunks_first_and_says_what_it_skipped(local, doc):
    result = LocalOnly(local, chunk_size=600, read_chunks=3).run("What was revenue in fiscal 2023?", [doc])
    chunks = result.reading["chunks"]
    assert len(result.jobs) == 3 and result.reading["read"] == 3 and result.reading["skipped"] == chunks - 3 > 0
    assert "not read" in result.reading["why"]
    # the chunk with the fact ranks first, so its quote heads the evidence, and the others follow as chunks
    assert result.evidence[0].kind == "quote" and result.evidence[0].text == FACT
    assert [e.kind for e in result.evidence[1:]] == ["chunk", "chunk"]
    assert all(e.document == "report.txt" and e.start is not None for e in result.evidence)


def test_local_only_says_so_when_nothing_answers(doc):
    local = ScriptedBackend("scripted/local", responder=lambda m, p: json.dumps({"quote": "none", "answer": None}))
    result = LocalOnly(local, read_chunks=4).run("Who founded the company?", [doc])
    assert result.complete and result.citations == ()
    assert result.answer.startswith("The documents do not seem to answer this") and "4 passages" in result.answer
    assert len(result.evidence) == 4 and all(e.kind == "chunk" for e in result.evidence)


def test_local_only_refuses_a_quote_that_is_not_in_the_chunk(doc):
    """A backend that ignores the schema and writes its own quote: only a verbatim one counts."""
    local = ScriptedBackend(
        "scripted/local",
        responder=lambda m, p: json.dumps({"quote": "Revenue was nine trillion dollars", "answer": "9T"}),
    )
    result = LocalOnly(local, read_chunks=2).run("What was revenue?", [doc])
    assert result.citations == () and all(not j.ok and "not in the excerpt" in (j.error or "") for j in result.jobs)
    assert all(j.attempts == 2 for j in result.jobs)


class Scorer(ScriptedBackend):
    """A local model that reports log-probabilities: asked which line of its excerpt answers, it names the line that
    holds ``needle`` (its label's log-probability high, the other labels' low), as the distribution of the token
    after the reply's start. ``restates``: the start was closed as a message of its own (a server's chat template
    does that) and the reply writes it again before the label, a token at a time."""

    def __init__(self, needle: str, *, restates: bool = False) -> None:
        super().__init__("scripted/scorer", capabilities=Capabilities(logprobs=True, batching=True, local=True))
        self.needle = needle
        self.restates = restates

    def _chat(self, messages, params):
        self.history.append(ScriptedCall(messages, params))
        assert params.logprobs > 0 and "." in params.stop
        assert messages[-1].role == "assistant"  # the start of the reply, which the label follows
        lines = re.findall(r"^\[([A-Z])\] (.*)$", messages[1].content, re.MULTILINE)
        top = [[" line", -0.5]] + [[f" {tag}", -0.2 if self.needle in text else -4.0] for tag, text in lines]
        top = sorted(top, key=lambda pair: -pair[1])[:20]
        words = [[[word, -0.1], ["A", -3.0]] for word in ("The", " line", " that", " answers", " is")]
        steps = [*words, top] if self.restates else [top]
        assert len(steps) <= params.max_tokens
        text = "".join(step[0][0] for step in steps)
        return ChatResult(text, Usage(prompt_tokens=10, completion_tokens=len(steps), calls=1), "stop", Timings(),
                          self.name, stats={"logprobs": steps})  # fmt: skip


@pytest.mark.parametrize("restates", [False, True], ids=["continues-the-reply", "writes-its-start-again"])
def test_local_only_scores_sentences_when_the_backend_reports_log_probabilities(doc, restates):
    scorer = Scorer("Revenue in fiscal 2023", restates=restates)
    result = LocalOnly(scorer, chunk_size=600, read_chunks=3).run("What was revenue in fiscal 2023?", [doc])

    assert result.complete and result.citations[0].text == FACT and FACT in result.answer
    assert result.reading["read"] == 3 and len(result.evidence) == 3 and "label" in result.reading["why"]
    assert result.evidence[0].text == FACT and result.evidence[0].kind == "quote"
    # one prompt per read chunk: its lines labelled, then the question, then the start of the reply
    prompts = [c.messages[1].content for c in scorer.history]
    assert len(prompts) == 3 and all(p.startswith("Excerpt (report.txt") and "\n[A] " in p for p in prompts)
    assert all(p.endswith("Which line answers the question?") for p in prompts)
    fact_job = next(j for j in result.jobs if j.citation == FACT)
    assert fact_job.score == -0.2
    assert all(j.score is not None and j.score <= -4.0 for j in result.jobs if j is not fact_job)


def test_a_backend_that_drops_the_log_probabilities_it_declared_gets_the_schema_path_not_failed_jobs(doc):
    """A server (or a proxy) that answers a scoring job without its log-probabilities: the job is asked again
    through the JSON schema, and the run answers as it would on a backend that never declared them."""

    def drops_logprobs(messages, params):
        return "B" if params.logprobs else job_reply(messages, params)

    local = ScriptedBackend(
        "scripted/proxy",
        responder=drops_logprobs,
        capabilities=Capabilities(json_schema=True, logprobs=True, local=True),
    )
    result = LocalOnly(local, chunk_size=600, read_chunks=3).run("What was revenue in fiscal 2023?", [doc])
    assert result.complete and result.citations[0].text == FACT
    assert all(j.ok and j.attempts == 2 for j in result.jobs)
    asked = [c.params for c in local.history]
    assert [p.logprobs > 0 for p in asked] == [True] * 3 + [False] * 3
    assert all(p.json_schema is not None for p in asked[3:])


def test_a_question_with_pasted_context_works_locally_and_in_the_minions_fallback(local, doc):
    question = "What was revenue in fiscal 2023? " + "Context pasted by the user. " * 80
    assert len(question) > 1500
    result = LocalOnly(local).run(question, [doc])
    assert result.complete and FACT in result.answer
    planner = ScriptedBackend("scripted/remote", responder=lambda m, p: "no plan today")
    from minions.protocols import Minions

    result = Minions(local, planner, fallback_plan=True, max_rounds=1, max_retries=0).run(question, [doc])
    assert result.jobs and any(j.citation == FACT for j in result.jobs)


class CostedBackend(ScriptedBackend):
    """A local model that says what each prompt would cost it: ``cost`` tokens (a saved chunk costs only the
    question after it, a new one all of it)."""

    def __init__(self, cost: int, address: str | None = None) -> None:
        super().__init__("scripted/local", responder=job_reply, address=address)
        self.cost = cost
        self.asked = 0

    def prompt_tokens(self, requests: list[ChatRequest]) -> list[int]:
        self.asked += len(requests)
        return [self.cost for _ in requests]


def test_past_its_prompt_budget_the_local_model_quotes_chunks_by_words(doc):
    question = "What was revenue in fiscal 2023?"
    cold = LocalOnly(CostedBackend(400), chunk_size=600, read_chunks=4, read_tokens=900).run(question, [doc])
    # the best chunk and one more fit in 900 new tokens (400 each); the other two are quoted by words
    assert cold.reading["by_words"] == 2 and len(cold.jobs) == 4
    by_words = [j for j in cold.jobs if j.attempts == 0]
    assert [j.job_id for j in by_words] == [2, 3] and all(j.ok and j.citation for j in by_words)
    assert all(j.citation in doc.text for j in by_words) and "quoted by words" in cold.reading["why"]
    assert cold.usage["local"].calls == 2 and cold.evidence[0].text == FACT
    assert cold.answer.startswith("$4.2 billion")
    # chunks whose states are saved cost only their question: the model reads all four
    local = CostedBackend(40)
    warm = LocalOnly(local, chunk_size=600, read_chunks=4, read_tokens=900).run(question, [doc])
    assert warm.reading["by_words"] == 0 and warm.usage["local"].calls == 4
    # no limit: the model reads every chunk, and is not asked what they cost
    unlimited = CostedBackend(400)
    assert (
        LocalOnly(unlimited, chunk_size=600, read_chunks=4, read_tokens=None).run(question, [doc]).usage["local"].calls
        == 4
    )
    assert unlimited.asked == 0
    # a server on this device computes on the same cores: the same budget; one on another machine reads them all
    here = LocalOnly(CostedBackend(400, "http://127.0.0.1:8080/v1"), chunk_size=600, read_chunks=4, read_tokens=900)
    assert here.run(question, [doc]).reading["by_words"] == 2
    away = CostedBackend(400, "http://10.0.0.7:8080/v1")
    assert (
        LocalOnly(away, chunk_size=600, read_chunks=4, read_tokens=900).run(question, [doc]).usage["local"].calls == 4
    )
    assert away.asked == 0
