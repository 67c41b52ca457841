"""RemoteOnly, LocalOnly and RAG: the same interface, simpler plans."""

from __future__ import annotations

import json

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.protocols import RAG, LocalOnly, RemoteOnly

from .helpers import FACT, SECRET, job_reply


def test_remote_only_cuts_to_the_context_window_with_a_notice(doc):
    remote = ScriptedBackend(
        "scripted/gpt-4o",
        replies=(json.dumps({"answer": "unknown"}),),
        capabilities=Capabilities(json_schema=True, local=False, context_window=1000),
    )
    events = []
    result = RemoteOnly(remote, remote, remote_max_tokens=200).run("Revenue?", [doc], events=events.append)
    assert result.complete and result.answer == "unknown"
    notice = [e for e in events if e.kind == "notice"]
    assert notice and "context window" in notice[0].message
    sent = result.egress[-1].text
    assert remote.count_tokens(sent) < 1000 and len(sent) < len(doc.text)
    assert result.remote_only_estimate.prompt_tokens > 1000


def test_remote_only_drops_citations_that_are_not_in_the_documents(remote, doc):
    remote.enqueue(json.dumps({"answer": "$4.2 billion", "citations": [FACT, "made up words entirely"]}))
    result = RemoteOnly(remote, remote).run("Revenue?", [doc])
    assert [c.text for c in result.citations] == [FACT]


def test_rag_sends_only_the_best_chunks(remote, doc):
    remote.enqueue(json.dumps({"answer": "$4.2 billion", "citations": ["Revenue in fiscal 2023 was $4.2 billion"]}))
    result = RAG(remote, remote, top_k=2, chunk_size=800).run("What was revenue in fiscal 2023?", [doc])
    sent = "\n".join(r.text for r in result.egress)
    assert FACT in sent and SECRET not in sent and len(sent) < len(doc.text) / 2
    assert result.citations[0].document == "report.txt" and result.answer == "$4.2 billion"


def test_local_only_maps_and_reduces_on_the_device(local, doc):
    def responder(messages, params):
        if messages[0].role == "user" and "Answers found" in messages[0].content:
            return json.dumps({"answer": "4.2 billion dollars"})
        return job_reply(messages, params)

    local.responder = responder
    result = LocalOnly(local).run("What was revenue in fiscal 2023?", [doc])
    assert result.complete and result.egress == () and result.usage["remote"].calls == 0
    assert result.answer == "$4.2 billion"  # one finding: no reduce needed
    assert result.citations and result.usage["local"].calls == len(result.jobs)


def test_local_only_keeps_the_majority_when_the_reduce_is_junk(doc):
    def responder(messages, params):
        if "Answers found" in messages[-1].content:
            return "hmm"
        return json.dumps(
            {"explanation": "", "citation": None, "answer": "42" if "Paragraph 1" in messages[-1].content else "7"}
        )

    local = ScriptedBackend("scripted/local", responder=responder)
    result = LocalOnly(local, chunk_size=1000).run("Number?", [doc])
    assert result.answer == "7" and result.usage["local"].calls == len(result.jobs) + 1
