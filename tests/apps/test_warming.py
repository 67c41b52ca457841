"""Reading documents ahead of questions in the app: "reading... N%" after an upload, "ready" when every chunk's
prefix is saved, a few chunks per call to the model (so questions get it between calls)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from fastapi.testclient import TestClient

from minions.apps.state import AppState
from minions.apps.warming import READ_STEP
from minions.backends.scripted import ScriptedBackend
from minions.types import ChatRequest

from .conftest import AppFactory
from .helpers import local_reply

TEXT = " ".join(f"Sentence {i} of the report says that revenue grew by {i} percent." for i in range(160))


class ReadingBackend(ScriptedBackend):
    """A local model that keeps prompt prefixes: each call waits for ``gate``, then reports its chunks done."""

    def __init__(self) -> None:
        super().__init__("scripted/local", responder=local_reply)
        self.gate = threading.Event()
        self.calls: list[int] = []

    def save_prefixes(
        self,
        requests: Sequence[ChatRequest],
        *,
        on_progress: Callable[[Any], None] | None = None,
        cancel: Any = None,
    ) -> Any:
        assert all(r.prefix is not None for r in requests)  # the jobs' own requests, chunk marked
        self.gate.wait(10)
        self.calls.append(len(requests))
        stats = SimpleNamespace(done=len(requests), computed_tokens=100 * len(requests), tokens_per_s=50.0)
        if on_progress is not None:
            on_progress(stats)
        return stats


def state(client: TestClient) -> AppState:
    app_state: AppState = client.app.state.minions  # type: ignore[attr-defined]
    return app_state


def test_an_upload_is_read_ahead_then_ready(make_app: AppFactory) -> None:
    local = ReadingBackend()
    with TestClient(make_app(local, None, warm_chunk_states=True), base_url="http://127.0.0.1:8765") as client:
        added = client.post("/api/documents", files={"files": ("notes.txt", TEXT.encode())}).json()["added"][0]
        assert added["reading"]["state"] in ("queued", "reading") and added["reading"]["percent"] == 0
        local.gate.set()
        state(client).reader.wait()
        (doc,) = client.get("/api/documents").json()["documents"]
        assert doc["reading"] == {"state": "ready", "percent": 100, "error": None}
    chunks = sum(local.calls)
    assert chunks > READ_STEP and local.calls[0] == READ_STEP  # in steps, not the whole document at once


def test_a_model_that_keeps_no_prefixes_shows_no_reading(client: TestClient) -> None:
    client.post("/api/documents", files={"files": ("notes.txt", TEXT.encode())})
    (doc,) = client.get("/api/documents").json()["documents"]
    assert doc["reading"] is None


def test_by_default_an_upload_is_ready_once_its_text_is_indexed(make_app: AppFactory) -> None:
    local = ReadingBackend()
    local.gate.set()
    with TestClient(make_app(local, None), base_url="http://127.0.0.1:8765") as client:
        added = client.post("/api/documents", files={"files": ("notes.txt", TEXT.encode())}).json()["added"][0]
        assert added["reading"] is None  # nothing to wait for: no chunk state is computed ahead
        listed = client.get("/api/documents").json()
        assert listed["documents"][0]["index_bytes"] > 0 and listed["index_bytes"] > 0
    assert local.calls == []
