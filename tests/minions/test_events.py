from __future__ import annotations

import logging

from minions.events import CancelToken, JobFailed, PlanReady, emit


def test_emit_delivers_events_and_survives_a_broken_sink(caplog) -> None:
    seen = []
    emit(seen.append, PlanReady(round=1, jobs=3))
    assert seen == [PlanReady(round=1, jobs=3)]

    def broken(event: object) -> None:
        raise RuntimeError("renderer bug")

    with caplog.at_level(logging.ERROR):
        emit(broken, PlanReady(round=1, jobs=3))
    assert "event sink failed" in caplog.text
    emit(None, PlanReady(round=1, jobs=3))


def test_events_serialize_with_their_kind() -> None:
    d = JobFailed(job_id=2, round=1, label="a.pdf p.3", error="timeout", will_retry=True).to_dict()
    assert d == {
        "kind": "job_failed",
        "job_id": 2,
        "round": 1,
        "label": "a.pdf p.3",
        "error": "timeout",
        "will_retry": True,
    }


def test_cancel_token() -> None:
    token = CancelToken()
    assert not token.cancelled
    token.cancel()
    assert token.cancelled
