"""What leaves the device: redaction and the egress log."""

from __future__ import annotations

import json

import pytest

from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.protocols import Minions, Redactor, RemoteOnly

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
