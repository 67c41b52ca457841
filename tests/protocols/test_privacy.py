"""What leaves the device: redaction and the egress log."""

from __future__ import annotations

import json

import httpx
import pytest

from minions.backends.ollama import OllamaBackend
from minions.backends.openai import OpenAIBackend
from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.events import CancelToken
from minions.protocols import (
    EgressLog,
    LocalEgress,
    LocalOnly,
    Minion,
    Minions,
    Redactor,
    RemoteOnly,
    remote_leaves_device,
)
from minions.types import ChatRequest, Message, SamplingParams

from .helpers import FACT, final, job_reply, make_text, plan

PII = (
    "jane.smith@example.com",
    "(555) 123-4567",
    "123-45-6789",
    "DE89 3704 0044 0532 0130 00",
    "Jane Smith",
    "98765432101",
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("write to jane.smith@example.com today", "EMAIL"),
        ("call (555) 123-4567 or 555-123-4567", "PHONE"),
        ("call +44 20 7946 0958", "PHONE"),
        ("SSN 123-45-6789", "SSN"),
        ("IBAN DE89 3704 0044 0532 0130 00", "IBAN"),
        ("Account number: 98765432101", "ID"),
        ("customer ID: AB-123456", "ID"),
        ("card 4111 1111 1111 1111", "CARD"),
        ("met Dr. Jane Smith", "NAME"),
        ("Mr. X agreed", "NAME"),
    ],
)
def test_redactor_replaces_personal_data(text, kind):
    out = Redactor().redact(text)
    assert f"[{kind}_1]" in out


def test_redactor_leaves_business_numbers_and_restores_placeholders():
    r = Redactor()
    text = "Revenue was $1,577.00 million in FY2018, up 12.5% from 2017; see page 42. Prof. Ada Lovelace wrote."
    out = r.redact(text)
    assert "$1,577.00 million in FY2018, up 12.5% from 2017; see page 42." in out
    assert "Ada Lovelace" not in out and "[NAME_1]" in out
    assert r.redact("Lovelace again") == "[NAME_1] again"  # a known surname, without its title
    assert r.restore("Ask [NAME_1].") == "Ask Ada Lovelace."


def test_same_value_same_placeholder():
    r = Redactor()
    assert r.redact("a@b.co and c@d.co") == "[EMAIL_1] and [EMAIL_2]"
    assert r.redact("again a@b.co") == "again [EMAIL_1]"


def test_minions_redacts_everything_it_sends_and_the_log_proves_it(remote):
    person = "Dr. Jane Smith (jane.smith@example.com, (555) 123-4567, SSN 123-45-6789)"
    doc = Document.from_text(make_text() + f"\n\nThe account of {person} is 98765432101.", name="r.txt")

    def leaky(messages, params):
        if "Jane Smith" in messages[-1].content:
            return json.dumps(
                {
                    "explanation": "Contact is Dr. Jane Smith, jane.smith@example.com.",
                    "citation": "account of Dr. Jane Smith",
                    "answer": "Dr. Jane Smith, 98765432101",
                }
            )
        return job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=leaky)
    remote.enqueue(
        plan({"instruction": "Who is the contact for Dr. Jane Smith's account jane.smith@example.com?"}),
        final("The contact is [NAME_1]."),
    )
    result = Minions(local, remote, redact=True).run(f"Who handles the account of {person}?", [doc])

    egress = "\n".join(r.text for r in result.egress)
    assert result.egress and all(secret not in egress for secret in PII)
    assert "[NAME_1]" in egress and "[EMAIL_1]" in egress
    # what the remote model received is exactly the redacted log
    assert egress == "\n".join(m.content for c in remote.history for m in c.messages)
    # the local model (on this device) reads the instruction with the values put back
    assert any("jane.smith@example.com" in c.prompt for c in local.history)
    assert result.answer == "The contact is Jane Smith."


def test_redaction_does_not_touch_a_remote_on_this_device(local):
    doc = Document.from_text(make_text() + "\n\nMail jane@example.com.", name="r.txt")
    on_device = ScriptedBackend("scripted/big-local", replies=(plan(), final()))
    result = Minions(local, on_device, redact=True).run("Email of jane@example.com?", [doc])
    assert result.egress == () and "jane@example.com" in on_device.history[0].prompt


def test_a_local_model_cast_as_the_remote_one_plans_and_nothing_leaves(doc):
    def both_parts(messages, params):
        prompt = messages[-1].content
        if prompt.startswith("You direct"):
            return final() if "What the local model found" in prompt else plan()
        return job_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=both_parts)
    result = Minions(local, local).run("What was revenue?", [doc])
    assert result.complete and result.egress == () and result.usage["remote"].calls == 2


def test_remote_only_sends_the_document_and_logs_it(remote, doc):
    remote.enqueue(json.dumps({"answer": "$4.2 billion", "citations": [FACT]}))
    result = RemoteOnly(remote, remote).run("What was revenue?", [doc])
    assert FACT in "\n".join(r.text for r in result.egress)
    assert result.citations[0].text == FACT


# -- the local model: on this device by its address, or every prompt sent to it is recorded ------------------

ELSEWHERE = "http://192.0.2.1:11434"  # TEST-NET-1: never reached, the backends here are scripted or mocked


def test_a_local_model_on_another_machine_has_every_prompt_recorded(doc):
    away = ScriptedBackend("scripted/gpt-4o-mini", responder=job_reply, address=ELSEWHERE)
    result = LocalOnly(away).run("What was revenue in fiscal 2023?", [doc])

    assert result.complete and "$4.2 billion" in result.answer
    local = [r for r in result.egress if r.step == "local"]
    assert len(local) == len(result.egress) == len(away.history) > 0
    assert [r.text for r in local] == ["\n\n".join(m.content for m in c.messages) for c in away.history]
    assert all(r.host == "192.0.2.1:11434" and r.backend == "scripted/gpt-4o-mini" for r in local)
    assert any(FACT in r.text for r in local)  # the chunks themselves left
    assert result.local_egress == (
        f"{len(local)} local prompts ({sum(len(r.text) for r in local):,} characters) left this device to "
        "192.0.2.1:11434 (the local model is not on this device)"
    )
    assert result.usage["local"].cost_usd > 0  # a model elsewhere is priced like any other
    assert result.to_dict()["local_egress"] == result.local_egress


def test_a_local_model_on_loopback_is_on_this_device(doc):
    here = ScriptedBackend("scripted/gpt-4o-mini", responder=job_reply, address="http://127.0.0.1:11434")
    result = LocalOnly(here).run("What was revenue in fiscal 2023?", [doc])
    assert result.complete and here.history and result.egress == () and result.local_egress is None
    assert result.usage["local"].cost_usd == 0


def test_minions_with_a_local_model_elsewhere_records_both_roles(remote, doc):
    away = ScriptedBackend("scripted/away", responder=job_reply, address=ELSEWHERE)
    remote.enqueue(plan(), final())
    result = Minions(away, remote).run("What was revenue in fiscal 2023?", [doc])

    steps = [r.step for r in result.egress]
    assert [s for s in steps if s != "local"] == ["plan:user", "decide:user"]  # the remote log as before
    assert steps.count("local") == len(away.history) > 0
    assert {r.round for r in result.egress if r.step == "local"} == {1}
    assert all(r.host is None for r in result.egress if r.step != "local")  # the scripted remote has no address


def test_minion_records_the_whole_context_sent_to_a_local_model_elsewhere(remote, doc):
    away = ScriptedBackend("scripted/away", replies=(json.dumps({"answer": "$4.2 billion"}),), address=ELSEWHERE)
    remote.enqueue(
        json.dumps({"decision": "ask", "message": "What was revenue?"}),
        json.dumps({"decision": "final", "answer": "$4.2 billion"}),
    )
    result = Minion(away, remote).run("Revenue?", [doc])
    (sent,) = [r for r in result.egress if r.step == "local"]
    assert FACT in sent.text and "What was revenue?" in sent.text and sent.round == 1


def ollama_server(seen: list[httpx.Request]) -> httpx.MockTransport:
    """Ollama's /api/chat, answering each job as the scripted local model would (``seen`` holds the chats), and
    the /api/show the backend asks once."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            return httpx.Response(200, json={"model_info": {"general.architecture": "llama"}})
        body = json.loads(request.content)
        if body.get("logprobs") and body.get("options", {}).get("num_predict") == 1:
            # the backend's one question of its own (does the server report log-probabilities?): no user text
            message = {"role": "assistant", "content": "ok"}
            return httpx.Response(200, json={"model": body["model"], "message": message, "done": True})
        seen.append(request)
        messages = [Message(m["role"], m["content"]) for m in body["messages"]]
        text = job_reply(messages, SamplingParams(json_schema=body.get("format")))
        message = {"role": "assistant", "content": text}
        return httpx.Response(200, json={"model": body["model"], "message": message, "done": True})

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(("host", "leaves"), [(ELSEWHERE, True), ("http://127.0.0.1:11434", False)])
def test_ollama_as_the_local_model_is_recorded_only_on_another_host(doc, host, leaves):
    seen: list[httpx.Request] = []
    local = OllamaBackend("llama3.2", host=host, transport=ollama_server(seen))
    result = LocalOnly(local).run("What was revenue in fiscal 2023?", [doc])

    assert result.complete and "$4.2 billion" in result.answer and seen
    # elsewhere, the backend's question of its own (does the server report log-probabilities?) left too
    assert len(result.egress) == (len(seen) + 1 if leaves else 0)
    assert [r.text for r in result.egress[:1]] == (["Hi"] if leaves else [])
    assert (result.local_egress is not None) == leaves


def test_a_batch_records_what_it_sent_not_what_was_cancelled():
    away = ScriptedBackend("scripted/away", replies=("a", "b"), address=ELSEWHERE)
    egress = EgressLog()
    local = LocalEgress(away, egress, lambda: 3)
    requests = [ChatRequest([Message("user", f"prompt {i}")], SamplingParams()) for i in range(2)]
    cancel = CancelToken()
    cancel.cancel()
    assert [r.finish_reason for r in local.batch(requests, cancel=cancel)] == ["cancelled", "cancelled"]
    assert egress.records == ()
    local.batch(requests)
    assert [(r.round, r.step, r.text) for r in egress.records] == [(3, "local", "prompt 0"), (3, "local", "prompt 1")]


def test_the_remote_role_is_recorded_for_any_server_even_on_loopback():
    """A server cast as the remote model stands for a cloud model (or is a proxy to one): its egress is logged
    wherever it listens; only a model in this process is exempt."""
    assert remote_leaves_device(OpenAIBackend("smollm2", base_url="http://127.0.0.1:8080/v1"))
    assert remote_leaves_device(OllamaBackend("llama3.2", host="http://127.0.0.1:11434"))
    assert remote_leaves_device(ScriptedBackend("scripted/away", address=ELSEWHERE))
    assert not remote_leaves_device(ScriptedBackend("scripted/local"))
