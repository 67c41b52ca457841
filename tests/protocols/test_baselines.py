"""RemoteOnly and RAG: the same interface, simpler plans."""

from __future__ import annotations

import json

import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.errors import ContextLengthError
from minions.protocols import RAG, RemoteOnly
from minions.tokens import count_tokens
from minions.types import Message, SamplingParams

from .helpers import FACT, SECRET


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
    assert notice and "context window (1000 tokens)" in notice[0].message
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


def test_rag_sends_no_more_than_the_context_window_the_server_states(doc):
    """A model on a local server declares no window (it is taken to be large); when the prompt overruns the
    server's, the error says how large it is, and RAG asks again with the best chunks that fit it."""
    window, reply = 700, json.dumps({"answer": "$4.2 billion", "citations": [FACT]})

    def server(messages: list[Message], params: SamplingParams) -> str:
        asked = sum(count_tokens(m.content) for m in messages) + params.max_tokens
        if asked > window:
            raise ContextLengthError(f"maximum context length is {window} tokens, you requested {asked}",
                                     window=window)  # fmt: skip
        return reply

    remote = ScriptedBackend("scripted/remote", responder=server)
    events: list = []
    rag = RAG(remote, remote, top_k=8, chunk_size=400, remote_max_tokens=200)
    result = rag.run("What was revenue in fiscal 2023?", [doc], events=events.append)
    assert result.complete and result.answer == "$4.2 billion" and result.citations[0].text == FACT
    assert [c.params.max_tokens for c in remote.history] == [200, 200]
    first, fitted = (sum(count_tokens(m.content) for m in c.messages) for c in remote.history)
    assert first + 200 > window >= fitted + 200
    assert len(result.evidence) < 8 and FACT in result.evidence[0].text  # what was sent, the best first
    assert any(e.kind == "notice" and f"{window} tokens" in e.message for e in events)


@pytest.mark.parametrize("protocol", [RAG, RemoteOnly])
def test_a_reply_that_never_validates_keeps_the_evidence_that_was_sent(doc, protocol):
    remote = ScriptedBackend("scripted/remote", replies=("not json",) * 3, capabilities=Capabilities(local=False))
    run = protocol(remote, remote, top_k=2, chunk_size=800, max_retries=2)
    result = run.run("What was revenue in fiscal 2023?", [doc])
    assert not result.complete and "ModelOutputError" in result.notes[0] and len(remote.history) == 3
    sent = "\n".join(r.text for r in result.egress)
    assert result.evidence and all(e.text in sent for e in result.evidence)
    assert any(FACT in e.text for e in result.evidence)


def test_rag_passes_on_a_context_error_that_states_no_window(doc):
    remote = ScriptedBackend("scripted/remote", replies=(ContextLengthError("too long"),))
    result = RAG(remote, remote, top_k=4, chunk_size=400).run("What was revenue in fiscal 2023?", [doc])
    assert not result.complete and "too long" in (result.error or "") and len(remote.history) == 1
