from __future__ import annotations

from minions.backends.scripted import ScriptedBackend
from minions.errors import BackendConnectionError
from minions.types import ChatRequest, Message


def test_replies_in_order_and_records_history() -> None:
    fake = ScriptedBackend(replies=("one",)).enqueue("two")
    assert fake.chat("a").text == "one"
    assert fake.chat([{"role": "user", "content": "b"}]).text == "two"
    assert [c.prompt for c in fake.history] == ["a", "b"]


def test_batch_turns_a_failed_job_into_an_error_result_and_keeps_the_rest() -> None:
    fake = ScriptedBackend(replies=("ok1", BackendConnectionError("gone"), "ok3"))
    results = fake.batch([ChatRequest([Message("user", str(i))]) for i in range(3)])
    assert [r.finish_reason for r in results] == ["stop", "error", "stop"]
    assert results[1].error is not None and "gone" in results[1].error
    assert results[2].text == "ok3"


def test_responder_answers_by_content() -> None:
    fake = ScriptedBackend(responder=lambda messages, params: messages[-1].content.upper())
    assert fake.chat("shout").text == "SHOUT"
