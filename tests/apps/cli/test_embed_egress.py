"""What left the device to an embedding model on another machine, as the command line and MCP's ``ask`` show it:
``minions ask --json`` and its table, ``minions cache`` (the library's log). The other machine is a recording
``/v1/embeddings`` server on 127.0.0.1 marked as off the device (``backends.address.elsewhere``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from minions.apps.cli.main import main
from minions.apps.mcp_server import _answer
from minions.backends.address import elsewhere
from minions.backends.registry import Factory
from minions.backends.scripted import ScriptedBackend
from tests.loopback import EmbeddingsServer, serving

from ...protocols.helpers import quote_reply

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "northwind-annual-report-2025.md"
QUESTION = "What was total revenue for 2025?"


@pytest.fixture
def away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, register_provider: Callable[[str, Factory], None]
) -> Iterator[EmbeddingsServer]:
    """The recording server, as another machine, named by ``MINIONS_EMBEDDINGS``, egress allowed; a scripted
    local model (``scriptedq/any``) and a library of the demo report in a folder of this test."""

    def reply(messages: list[Any], params: Any) -> str:
        return quote_reply(params, "Total revenue for 2025", "$31.8 million")

    register_provider("scriptedq", lambda model: ScriptedBackend("scriptedq/any", responder=reply))
    with serving(EmbeddingsServer()) as server, elsewhere(server.url):
        monkeypatch.setenv("MINIONS_EMBEDDINGS", f"openai-compatible/bag@{server.url}/v1")
        monkeypatch.setenv("MINIONS_EMBEDDINGS_EGRESS", "1")
        monkeypatch.setenv("MINIONS_LIBRARY", str(tmp_path / "library"))
        monkeypatch.delenv("MINIONS_REMOTE", raising=False)
        yield server


def test_ask_and_cache_show_what_left_to_be_embedded(
    away: EmbeddingsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", str(EXAMPLE), "--json", "--wait"]) == 0
    indexing = list(away.requests)
    sent = sum(len(t.encode("utf-8")) for r in indexing for t in r.inputs)
    capsys.readouterr()

    assert main(["ask", QUESTION, "--library", "--local", "scriptedq/any", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (record,) = [e for e in result["egress"] if e["step"] == "embed"]
    assert record["text"] == away.requests[-1].inputs[0] == QUESTION
    assert record["bytes"] == len(away.requests[-1].inputs[0].encode("utf-8")) and record["tokens"] == 6
    assert "the question's embedding (32 bytes, 6 tokens) left this device" in result["embed_egress"]

    assert main(["ask", QUESTION, "--library", "--local", "scriptedq/any"]) == 0
    table = " ".join(capsys.readouterr().out.split())  # the table's caption wraps
    assert "$31.8 million" in table and "the question's embedding (32 bytes, 6 tokens) left this device" in table

    assert main(["cache", "--json"]) == 0
    log = json.loads(capsys.readouterr().out)["library"]["embeddings_sent"]
    assert log["bytes"] == sent and log["per_document"][0]["document"] == EXAMPLE.name
    assert log["per_document"][0]["chunks"] == sum(len(r.inputs) for r in indexing)
    assert main(["cache"]) == 0
    assert f"sent off this device to be embedded ({away.url.split('//')[1]}): {sent:,} bytes" in capsys.readouterr().out


def test_mcp_ask_says_what_left_to_be_embedded(away: EmbeddingsServer, tmp_path: Path) -> None:
    from minions.protocols.library import Library

    with Library(tmp_path / "library", local="scriptedq/any") as library:
        library.add(EXAMPLE)
        answered = _answer(library.ask(QUESTION))
    assert answered.egress[0]["step"] == "embed" and answered.egress[0]["text"] == QUESTION
    assert answered.left_device.startswith("the question's embedding (32 bytes, 6 tokens) left this device")
