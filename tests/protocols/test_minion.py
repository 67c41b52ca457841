"""Minion: the remote model asks the local model (which holds the whole context) questions."""

from __future__ import annotations

import json

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.protocols import Minion

from .helpers import FACT, SECRET


def ask(question: str) -> str:
    return json.dumps({"decision": "ask", "message": question})


def answer(text: str) -> str:
    return json.dumps({"decision": "final", "answer": text})


def local_reply(messages, params):
    return json.dumps(
        {"explanation": "It says so.", "citation": "Revenue in fiscal 2023 was $4.2 billion", "answer": "$4.2 billion"}
    )


def test_the_remote_asks_and_answers_without_seeing_the_context(remote, doc):
    local = ScriptedBackend("scripted/local", responder=local_reply)
    remote.enqueue(ask("What was revenue in fiscal 2023?"), answer("Revenue was $4.2 billion."))
    result = Minion(local, remote).run("What was revenue in fiscal 2023?", [doc])

    assert result.complete and result.answer == "Revenue was $4.2 billion." and result.rounds == 1
    assert local.history[0].messages[0].role == "system" and FACT in local.history[0].messages[0].content
    assert local.history[0].messages[1].content == "What was revenue in fiscal 2023?"
    egress = "\n".join(r.text for r in result.egress)
    assert SECRET not in egress and FACT not in egress.replace("Revenue in fiscal 2023 was $4.2 billion", "")
    assert "$4.2 billion" in egress
    assert result.jobs[0].citation_verified and result.citations[0].document == "report.txt"
    assert result.usage["local"].calls == 1 and result.usage["remote"].calls == 2


def test_junk_from_the_local_model_is_passed_on_as_text(remote, doc):
    local = ScriptedBackend("scripted/local", replies=("the revenue is 4.2 billion i think",))
    remote.enqueue(ask("Revenue?"), answer("4.2 billion"))
    result = Minion(local, remote).run("Revenue?", [doc])
    assert result.jobs[0].answer == "the revenue is 4.2 billion i think"
    assert "4.2 billion i think" in remote.history[1].messages[-1].content


def test_after_the_last_question_the_remote_must_answer(remote, doc):
    local = ScriptedBackend("scripted/local", responder=local_reply)
    remote.enqueue(ask("Q1?"), ask("Q2?"), ask("Q3?"), answer("Final."))
    result = Minion(local, remote, max_rounds=2).run("Revenue?", [doc])
    assert result.complete and result.answer == "Final." and len(local.history) == 2
    assert "no questions left" in remote.history[-1].messages[-1].content


def test_a_long_context_is_cut_to_the_local_window_with_a_notice(remote, doc):
    small = ScriptedBackend(
        "scripted/local",
        responder=local_reply,
        capabilities=Capabilities(json_schema=True, local=True, context_window=800),
    )
    remote.enqueue(ask("Q?"), answer("A."))
    events = []
    result = Minion(small, remote).run("Revenue?", [doc], events=events.append)
    assert result.complete and any(e.kind == "notice" and "context" in e.message for e in events)
    assert len(small.history[0].messages[0].content) < len(doc.text) // 2


def test_a_remote_that_never_replies_json_gives_a_partial_result(remote, doc):
    local = ScriptedBackend("scripted/local", responder=local_reply)
    remote.enqueue(ask("Q?"), "blah", "blah", "blah")
    result = Minion(local, remote).run("Revenue?", [doc])
    assert not result.complete and result.answer == "$4.2 billion" and len(result.jobs) == 1
