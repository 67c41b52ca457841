"""The app with an embedding model on another machine (a recording ``/v1/embeddings`` server on 127.0.0.1, marked
as off the device by ``backends.address.elsewhere``): the question's embedding is in the run's egress, the chunks
sent in the library panel's documents, byte for byte against what the server received."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from minions.backends.address import elsewhere
from tests.loopback import EmbeddingsServer, serving

from .conftest import AppFactory
from .test_web import BASE, ask, upload

QUESTION = "What was revenue in fiscal 2023?"


def test_what_left_to_be_embedded_is_in_the_run_and_the_library_panel(
    make_local_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(EmbeddingsServer()) as server, elsewhere(server.url):
        monkeypatch.setenv("MINIONS_EMBEDDINGS", f"openai-compatible/bag@{server.url}/v1")
        monkeypatch.setenv("MINIONS_EMBEDDINGS_EGRESS", "1")
        with TestClient(make_local_app(), base_url=BASE) as client:
            assert upload(client).status_code == 200
            deadline = time.monotonic() + 30  # the chunks are embedded in a thread of the app's own
            while not (listed := client.get("/api/documents").json())["documents"][0]["embeddings_sent"]:
                assert time.monotonic() < deadline, "the chunks were never embedded"
                time.sleep(0.1)
            indexing = list(server.requests)
            _, events = ask(client, QUESTION)
    sent = sum(len(t.encode("utf-8")) for r in indexing for t in r.inputs)
    (document,) = listed["documents"]
    assert document["embeddings_sent"]["bytes"] == sent == listed["embeddings_sent"]["bytes"]
    assert document["embeddings_sent"]["chunks"] == sum(len(r.inputs) for r in indexing)
    result = events[-1]["message"]["meta"]["result"]
    (record,) = [e for e in result["egress"] if e["step"] == "embed"]
    assert record["text"] == server.requests[-1].inputs[0] == QUESTION
    assert record["bytes"] == len(QUESTION.encode("utf-8")) and record["host"] == server.url.split("//")[1]
    assert result["embed_egress"].startswith(f"the question's embedding ({record['bytes']} bytes")
