"""The app's JSON API and its ask stream, in-process on scripted models."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.errors import BackendConnectionError
from minions.types import Message, SamplingParams

from .conftest import AppFactory, LiveServer
from .helpers import ANSWER, FILLER, QUOTE, local_reply, make_pdf, remote_reply, report_pages, scripted_models

BASE = "http://127.0.0.1:8765"


def upload(client: TestClient, name: str = "report.pdf", data: bytes | None = None) -> httpx.Response:
    return client.post("/api/documents", files={"files": (name, make_pdf(report_pages()) if data is None else data)})


def ask(client: TestClient, question: str, **body: Any) -> tuple[str, list[dict[str, Any]]]:
    conversation = client.post("/api/conversations").json()["id"]
    with client.stream(
        "POST", f"/api/conversations/{conversation}/messages", json={"question": question, **body}
    ) as response:
        assert response.status_code == 200, response.read()
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    return conversation, events


def test_the_page_and_its_assets_are_served(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and '<textarea id="question"' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/app.css").status_code == 200


def test_an_answer_streams_progress_then_is_stored_with_citations_cost_and_egress(client: TestClient) -> None:
    assert upload(client).status_code == 200

    conversation, events = ask(client, "What was revenue in fiscal 2023?")

    kinds = [e["type"] if e["type"] != "progress" else e["event"]["kind"] for e in events]
    assert kinds[0] == "question" and kinds[1] == "plan_ready" and kinds[-1] == "answer"
    assert "job_finished" in kinds and "round_done" in kinds
    answer = events[-1]["message"]
    assert answer["content"] == ANSWER and answer["status"] == "ok"
    result = answer["meta"]["result"]
    (citation,) = result["citations"]
    assert citation["text"] == QUOTE and citation["document"] == "report.pdf" and citation["pages"] == [2]
    assert result["usage"]["remote"]["cost_usd"] > 0 and result["cost_usd"] > 0
    assert result["saving_usd"] is not None and answer["meta"]["remote_leaves_device"] is True
    egress = "\n".join(e["text"] for e in result["egress"])
    assert "What was revenue in fiscal 2023?" in egress and FILLER not in egress  # the chunks never left
    stored = client.get(f"/api/conversations/{conversation}").json()
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
    assert stored["title"] == "What was revenue in fiscal 2023?"


def test_a_restart_keeps_the_library_the_conversations_and_the_settings(make_app: AppFactory) -> None:
    with TestClient(make_app(), base_url=BASE) as client:
        upload(client)
        conversation, _ = ask(client, "What was revenue in fiscal 2023?")
        client.put("/api/settings", json={**client.get("/api/settings").json(), "protocol": "rag", "redact": True})

    with TestClient(make_app(), base_url=BASE) as client:
        assert [d["name"] for d in client.get("/api/documents").json()["documents"]] == ["report.pdf"]
        assert [c["id"] for c in client.get("/api/conversations").json()["conversations"]] == [conversation]
        messages = client.get(f"/api/conversations/{conversation}").json()["messages"]
        assert [m["content"] for m in messages] == ["What was revenue in fiscal 2023?", ANSWER]
        settings = client.get("/api/settings").json()
        assert settings["protocol"] == "rag" and settings["redact"] is True
        _, events = ask(client, "What was revenue in fiscal 2023?")  # the library's document still loads
        assert events[-1]["message"]["status"] == "ok"


def test_a_question_without_documents_stores_the_question_and_a_specific_error(client: TestClient) -> None:
    conversation, events = ask(client, "What was revenue?")
    assert events[-1]["message"]["status"] == "error"
    assert "No documents: add a document to the library" in events[-1]["message"]["content"]

    upload(client)
    _, events = ask(client, "What was revenue?", document_ids=[])
    assert "No documents selected" in events[-1]["message"]["content"]
    messages = client.get(f"/api/conversations/{conversation}").json()["messages"]
    assert [(m["role"], m["status"]) for m in messages] == [("user", "ok"), ("assistant", "error")]


def test_an_empty_question_or_an_unknown_conversation_is_refused_before_anything_is_stored(
    client: TestClient,
) -> None:
    conversation = client.post("/api/conversations").json()["id"]
    response = client.post(f"/api/conversations/{conversation}/messages", json={"question": "   "})
    assert response.status_code == 400 and "question is empty" in response.json()["error"]["message"]
    assert client.get(f"/api/conversations/{conversation}").json()["messages"] == []
    assert client.post("/api/conversations/nope/messages", json={"question": "Hi?"}).status_code == 404


def _remote_failing_at(step: str) -> ScriptedBackend:
    def reply(messages: list[Message], params: SamplingParams) -> str:
        if step in messages[0].content:
            raise BackendConnectionError(
                "Cannot reach scripted/gpt-4o-mini: connection refused", backend="scripted/gpt-4o-mini"
            )
        return remote_reply(messages, params)

    return ScriptedBackend(
        "scripted/gpt-4o-mini",
        responder=reply,
        capabilities=Capabilities(json_schema=True, local=False, context_window=128_000),
    )


def test_a_remote_model_that_goes_down_mid_answer_leaves_the_partial_answer_and_says_why(
    make_app: AppFactory,
) -> None:
    local = ScriptedBackend("scripted/local", responder=local_reply)
    with TestClient(make_app(local, _remote_failing_at("This is round")), base_url=BASE) as client:
        upload(client)
        conversation, events = ask(client, "What was revenue in fiscal 2023?")

        answer = events[-1]["message"]
        assert answer["status"] == "partial" and answer["content"] == "$4.2 billion"  # the local finding
        assert "BackendConnectionError" in answer["meta"]["result"]["notes"][0]
        assert any(e["type"] == "progress" and e["event"]["kind"] == "notice" for e in events)
        assert len(client.get(f"/api/conversations/{conversation}").json()["messages"]) == 2


def test_a_remote_model_that_is_down_from_the_start_gives_an_error_message(make_app: AppFactory) -> None:
    local = ScriptedBackend("scripted/local", responder=local_reply)
    with TestClient(make_app(local, _remote_failing_at("Plan jobs")), base_url=BASE) as client:
        upload(client)
        _, events = ask(client, "What was revenue in fiscal 2023?")
        answer = events[-1]["message"]
        assert answer["status"] == "error"
        assert answer["content"].startswith("No answer: BackendConnectionError: Cannot reach scripted/gpt-4o-mini")


def test_uploads_report_each_file_and_refuse_bad_ones_with_their_status(client: TestClient) -> None:
    response = client.post(
        "/api/documents", files=[("files", ("report.pdf", make_pdf(report_pages()))), ("files", ("virus.exe", b"MZ"))]
    )
    body = response.json()
    assert response.status_code == 200 and [d["name"] for d in body["added"]] == ["report.pdf"]
    assert "unsupported file type '.exe'" in body["rejected"][0]["error"]
    assert "path" not in body["added"][0]  # server paths stay on the server

    for name, data, status, message in [
        ("fake.pdf", b"hello", 415, "not a PDF"),
        ("empty.pdf", b"", 422, "empty"),
        ("broken.pdf", b"%PDF-1.7\ngarbage", 422, "not a readable PDF"),
    ]:
        response = upload(client, name, data)
        assert response.status_code == status and message in response.json()["error"]["message"]
    assert len(client.get("/api/documents").json()["documents"]) == 1


def test_pages_folders_and_removal(client: TestClient, tmp_path: Path) -> None:
    doc = upload(client).json()["added"][0]
    assert QUOTE in client.get(f"/api/documents/{doc['id']}/pages/2").json()["text"]
    assert client.get(f"/api/documents/{doc['id']}/pages/9").status_code == 404

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "q3.md").write_text("# Q3\n\nSales grew 5 percent.")
    (folder / "run.py").write_text("print('never executed')")
    added = client.post("/api/folders", json={"path": str(folder)}).json()["added"]
    assert [d["name"] for d in added] == ["q3.md"]
    missing = client.post("/api/folders", json={"path": str(tmp_path / "nope")})
    assert missing.status_code == 404 and "No such folder" in missing.json()["error"]["message"]

    assert client.delete(f"/api/documents/{doc['id']}").status_code == 200
    assert client.delete(f"/api/documents/{doc['id']}").status_code == 404
    assert [d["name"] for d in client.get("/api/documents").json()["documents"]] == ["q3.md"]


def test_settings_are_validated(client: TestClient) -> None:
    settings = client.get("/api/settings").json()
    assert settings["local"] == "scripted/local" and settings["remote"] == "scripted/gpt-4o-mini"
    for change, message in [
        ({"protocol": "magic"}, "unknown protocol"),
        ({"remote": "nosuch/model"}, "Unknown provider 'nosuch'"),
        ({"budget_usd": -1}, "budget_usd"),
        ({"color": "red"}, "color"),
    ]:
        response = client.put("/api/settings", json={**settings, **change})
        assert response.status_code == 400 and message in response.json()["error"]["message"], response.json()
    saved = client.put("/api/settings", json={**settings, "remote": "", "protocol": "local", "budget_tokens": 5000})
    assert saved.json()["remote"] is None and saved.json()["budget_tokens"] == 5000


def test_with_a_remote_model_the_default_is_minions(client: TestClient) -> None:
    assert client.get("/api/info").json()["defaults"]["protocol"] == "minions"
    assert client.get("/api/settings").json()["protocol"] == "minions"


def test_without_a_remote_model_the_default_is_local_and_the_others_are_offered_disabled(
    make_local_app: AppFactory,
) -> None:
    with TestClient(make_local_app(), base_url=BASE) as client:
        info = client.get("/api/info").json()
        assert info["defaults"]["protocol"] == "local" and info["defaults"]["remote"] is None
        assert {p["name"]: p["needs_remote"] for p in info["protocols"]} == {
            "minions": True, "minion": True, "remote": True, "local": False, "rag": True,
        }  # fmt: skip
        assert info["remote_needed"] == "needs a remote model: set one in Settings or MINIONS_REMOTE"
        settings = client.get("/api/settings").json()
        assert settings["protocol"] == "local" and settings["remote"] is None

        refused = client.put("/api/settings", json={**settings, "protocol": "minions"})
        assert refused.status_code == 400 and refused.json()["error"] == {
            "message": "The minions protocol needs a remote model: set one in Settings or MINIONS_REMOTE.",
            "type": "invalid_request_error", "code": None, "param": "protocol",
        }  # fmt: skip

        upload(client)
        _, events = ask(client, "What was revenue in fiscal 2023?")
        answer = events[-1]["message"]
        assert answer["status"] == "ok" and answer["meta"]["protocol"] == "local", answer
        assert answer["meta"]["result"]["egress"] == [] and answer["meta"]["remote_leaves_device"] is False


def test_a_local_model_on_another_machine_is_in_the_egress_and_said(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    away = ScriptedBackend("scripted/away", responder=local_reply, address="http://192.0.2.1:11434")
    with TestClient(make_app(away, None), base_url=BASE) as client:
        upload(client)
        _, events = ask(client, "What was revenue in fiscal 2023?")
    answer = events[-1]["message"]
    result = answer["meta"]["result"]
    assert answer["status"] == "ok" and answer["meta"]["remote_leaves_device"] is False, answer
    assert len(result["egress"]) == len(away.history) > 0
    assert {(e["step"], e["host"]) for e in result["egress"]} == {("local", "192.0.2.1:11434")}
    assert result["local_egress"].endswith("to 192.0.2.1:11434 (the local model is not on this device)")


def test_a_saved_protocol_that_needs_the_remote_model_gives_way_when_it_goes(make_local_app: AppFactory) -> None:
    app = make_local_app()
    settings = app.state.minions.settings().model_dump()
    app.state.minions.store.save_settings({**settings, "protocol": "rag"})  # saved by an older version
    with TestClient(app, base_url=BASE) as client:
        assert client.get("/api/settings").json()["protocol"] == "local"


def test_a_remote_model_given_at_start_brings_its_default_protocol(
    make_local_app: AppFactory, make_app: AppFactory
) -> None:
    make_local_app()  # saves the local model, and with it local, the only protocol without a remote model
    with TestClient(make_app(*scripted_models()), base_url=BASE) as client:
        settings = client.get("/api/settings").json()
        assert settings["remote"] == "scripted/gpt-4o-mini" and settings["protocol"] == "minions"


def test_conversations_can_be_listed_and_deleted(client: TestClient) -> None:
    upload(client)
    first, _ = ask(client, "What was revenue in fiscal 2023?")
    second = client.post("/api/conversations").json()["id"]
    assert [c["id"] for c in client.get("/api/conversations").json()["conversations"]] == [second, first]
    assert client.delete(f"/api/conversations/{first}").status_code == 200
    assert client.get(f"/api/conversations/{first}").status_code == 404


def test_a_client_that_disconnects_cancels_the_run_and_the_partial_answer_is_kept(make_app: AppFactory) -> None:
    def slow_local(messages: list[Message], params: SamplingParams) -> str:
        time.sleep(0.05)
        return local_reply(messages, params)

    local = ScriptedBackend("scripted/local", responder=slow_local)
    _, remote = scripted_models()
    long_text = ("Filler paragraph. " + FILLER * 3 + "\n\n") * 40
    with LiveServer(make_app(local, remote)) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        http.post("/api/documents", files={"files": ("long.txt", long_text.encode())})
        conversation = http.post("/api/conversations").json()["id"]
        with http.stream(
            "POST", f"/api/conversations/{conversation}/messages", json={"question": "What was revenue in fiscal 2023?"}
        ) as response:
            planned = 0
            for line in response.iter_lines():
                if '"plan_ready"' in line:
                    planned = json.loads(line[6:])["event"]["jobs"]
                if '"job_finished"' in line:
                    break  # the browser tab closes

        deadline = time.monotonic() + 10
        while len(messages := http.get(f"/api/conversations/{conversation}").json()["messages"]) < 2:
            assert time.monotonic() < deadline, "the cancelled run was never stored"
            time.sleep(0.1)
    answer = messages[1]
    assert answer["status"] == "cancelled", answer
    assert "Cancelled" in answer["meta"]["result"]["notes"][0]
    ran = [j for j in answer["meta"]["result"]["jobs"] if j["ok"]]
    assert planned > 16 and len(ran) < planned  # the jobs left when the tab closed never ran


def test_a_written_answer_streams_to_the_page_and_the_answer_setting_turns_it_off(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a remote model the app runs ``local``; a 3B local model (by its name) writes its answer, which
    streams as progress events; ``answer: quote`` in the settings keeps it to the quote."""
    from minions.protocols.prompts import render

    written = "Revenue in fiscal 2023 was $4.2 billion [1]."

    def reply(messages: list[Message], params: SamplingParams) -> str:
        return written if messages[0].content == render("written_system") else local_reply(messages, params)

    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    with TestClient(make_app(ScriptedBackend("scripted/llama3.2:3b", responder=reply), None), base_url=BASE) as client:
        upload(client)
        _, events = ask(client, "What was revenue in fiscal 2023?")
        tokens = [
            e["event"]["text"] for e in events if e["type"] == "progress" and e["event"]["kind"] == "answer_token"
        ]
        answer = events[-1]["message"]
        assert "".join(tokens) == answer["content"] == written
        assert answer["meta"]["result"]["reading"]["answer"]["cited"] == [1]

        settings = client.get("/api/settings").json()
        assert settings["answer"] == "auto"
        assert client.put("/api/settings", json={**settings, "answer": "essay"}).status_code in (400, 422)
        assert client.put("/api/settings", json={**settings, "answer": "quote"}).status_code == 200
        _, events = ask(client, "What was revenue in fiscal 2023?")
        assert not [e for e in events if e["type"] == "progress" and e["event"]["kind"] == "answer_token"]
        assert events[-1]["message"]["content"].startswith("$4.2 billion, according to report.pdf")
