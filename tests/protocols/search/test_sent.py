"""What a library sends to an embedding model on another machine is recorded: the chunks in the library's own log,
a question in its run's egress. The other machine is a recording ``/v1/embeddings`` server on 127.0.0.1 that the test
marks as off the device (``backends.address.elsewhere``); the client is the real ``openai`` SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minions.backends.address import elsewhere
from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.errors import ConfigError
from minions.protocols.library import Library
from minions.protocols.search.sent import sent_summary
from tests.loopback import EmbeddingsServer, serving

from ..helpers import quote_reply

FILLER = "The cooperative keeps its accounts in order and reports to its members every quarter. " * 6
NOTES = {
    "harbor.txt": f"{FILLER}\n\nHarbor Logistics moved 1.2 million containers in 2025, a record.\n\n{FILLER}",
    "orchard.txt": f"{FILLER}\n\nThe orchard sold 40 tonnes of apples to the café in Zürich.\n\n{FILLER}",
}
QUESTION = "How many containers did Harbor Logistics move in 2025?"


def reply(messages: Any, params: Any) -> str:
    return quote_reply(params, "1.2 million containers", "1.2 million")


def test_chunks_and_questions_sent_to_another_machine_are_recorded_byte_for_byte(tmp_path: Path) -> None:
    with serving(EmbeddingsServer()) as server, elsewhere(server.url):
        spec = f"openai-compatible/bag@{server.url}/v1"
        with pytest.raises(ConfigError, match="not on this device"):
            Library(embeddings=spec)
        library = Library(
            tmp_path / "lib", local=ScriptedBackend(responder=reply), embeddings=spec, allow_egress=True, read_chunks=2
        )
        assert library.embedder is not None and library.embedder.leaves_device  # type: ignore[attr-defined]
        added = library.add(*(Document.from_text(text, name=name) for name, text in NOTES.items()))
        indexing = list(server.requests)
        result = library.ask(QUESTION)
        asked = server.requests[len(indexing) :]

    # The library's log: every chunk's bytes as the server received them, in every request, and its tokens.
    log = library.index.sent()
    received = [len(t.encode("utf-8")) for r in indexing for t in r.inputs]
    assert sum(r.chunks for r in log) == len(received) == added.embedded
    assert sum(r.bytes for r in log) == sum(received)
    assert sum(r.tokens for r in log) == sum(len(t.split()) for r in indexing for t in r.inputs)
    assert {r.document for r in log} == set(NOTES) and {r.host for r in log} == {server.url.split("//")[1]}
    for name in NOTES:  # each document's bytes: its chunks' texts, each with the header that names it
        mine = [t for r in indexing for t in r.inputs if t.split("\n")[0].startswith(Path(name).stem)]
        assert sum(r.bytes for r in log if r.document == name) == sum(len(t.encode()) for t in mine)

    # The question: one egress record of the run, the text and bytes the server got, before the protocol's own.
    assert "1.2 million" in result.answer
    (request,) = asked
    (record,) = [e for e in result.egress if e.step == "embed"]
    assert result.egress[0] is record and record.round == 0
    assert record.text == request.inputs[0] == QUESTION and record.bytes == len(QUESTION.encode("utf-8"))
    assert record.tokens == len(QUESTION.split()) and record.host == server.url.split("//")[1]
    shown = result.to_dict()
    assert shown["egress"][0] | {"text": None} == {
        "round": 0, "step": "embed", "backend": f"openai-compatible/bag@{server.url}/v1", "host": record.host,
        "text": None, "chars": len(QUESTION), "bytes": record.bytes, "tokens": record.tokens, "usd": 0.0,
    }  # fmt: skip
    assert json.loads(json.dumps(shown))["embed_egress"] == result.embed_egress == result.device_egress
    assert f"({record.bytes:,} bytes, {record.tokens:,} tokens) left this device to {record.host}" in (
        result.embed_egress or ""
    )

    # The log stays with the library, and says what it holds in all and by document.
    library.close()
    with Library(tmp_path / "lib", embeddings="none") as again:
        summary = sent_summary(again.index.sent())
    assert summary["bytes"] == sum(received) and summary["to"] == [record.host]
    assert {d["document"]: d["bytes"] for d in summary["per_document"]} == {
        name: sum(r.bytes for r in log if r.document == name) for name in NOTES
    }


def test_an_embedder_on_this_device_records_nothing(tmp_path: Path) -> None:
    with serving(EmbeddingsServer()) as server:
        library = Library(local=ScriptedBackend(responder=reply), embeddings=f"openai-compatible/bag@{server.url}/v1")
        library.add(*(Document.from_text(text, name=name) for name, text in NOTES.items()))
        result = library.ask(QUESTION)
    assert server.requests and library.index.sent() == []
    assert [e for e in result.egress if e.step == "embed"] == [] and result.embed_egress is None
