"""The app on the real local model (llama.cpp with the shipped SmolLM2), through its HTTP API.

With no remote model the default protocol is ``local``: the local model reads the chunk of a short note, names
the line that answers, and answers with the one that holds the fact. The other protocols are tested on scripted
models and in their own suites.
"""

from __future__ import annotations

import json

import httpx
import pytest

from .conftest import AppFactory, LiveServer

pytestmark = pytest.mark.slow

NOTE = (
    "Quarterly note\n\n"
    "The Oslo office opened in March 2024 with twelve employees.\n\n"
    "Revenue for the first quarter was 3.1 million euros, mostly from consulting.\n"
)


def test_a_question_runs_on_smollm2_end_to_end_and_nothing_leaves_the_device(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from minions.backends.llamacpp import LlamaCppBackend

    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    app = make_app(LlamaCppBackend(n_ctx=4096), None)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=300) as http:
        settings = http.get("/api/settings").json()  # no remote model: local is the default
        assert settings["local"].startswith("llamacpp/") and settings["remote"] is None
        assert settings["protocol"] == "local"
        http.post("/api/documents", files={"files": ("note.txt", NOTE.encode())}).raise_for_status()
        conversation = http.post("/api/conversations").json()["id"]

        with http.stream(
            "POST", f"/api/conversations/{conversation}/messages", json={"question": "When did the Oslo office open?"}
        ) as response:
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]

    answer = events[-1]["message"]
    assert events[-1]["type"] == "answer" and answer["status"] == "ok", answer["content"]
    # the answer is the note's own sentence (after its heading), with its place: the local model picked it
    assert "Quarterly note The Oslo office opened in March 2024 with twelve employees." in answer["content"]
    assert "note.txt, line 1" in answer["content"]
    result = answer["meta"]["result"]
    assert result["citations"][0]["label"] == "note.txt line 1"
    assert result["usage"]["local"]["calls"] > 0 and result["usage"]["local"]["prompt_tokens"] > 0
    assert result["egress"] == [] and answer["meta"]["remote_leaves_device"] is False
    assert result["cost_usd"] == 0
    kinds = [e["event"]["kind"] for e in events if e["type"] == "progress"]
    assert "job_started" in kinds and "job_finished" in kinds
