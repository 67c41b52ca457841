"""``minions mcp`` as an assistant meets it: the command started as a subprocess and talked to with the MCP SDK's own
client, over stdio and over streamable HTTP on 127.0.0.1, against a library of real FinanceBench PDFs and the demo
report, on the embedded model."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextResourceContents

from minions.apps.mcp_server import page_uri
from minions.protocols.library import Library

from ..conftest import BENCHMARK_DATA
from .conftest import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "northwind-annual-report-2025.md"
PDFS = BENCHMARK_DATA / "financebench" / "pdfs"
FILINGS = ("ULTABEAUTY_2023Q4_EARNINGS.pdf", "AMCOR_2023Q4_EARNINGS.pdf", "PEPSICO_2023_8K_dated-2023-05-05.pdf")
ULTA = "What drove the increase in Ulta Beauty's merchandise inventories balance at end of FY2023?"
"""FinanceBench's question whose evidence is on page 3 (its 0-based page 2) of Ulta's earnings release."""
DEMO_QUESTION = "What was Northwind's total revenue in 2025?"
START_S = 300.0
"""How long a request may take: the first question on a fresh machine quantizes the model first."""


@pytest.fixture(scope="module")
def built_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [f for f in FILINGS if not (PDFS / f).exists()]
    if missing:
        pytest.skip(f"needs FinanceBench's PDFs in {PDFS} (missing {', '.join(missing)})")
    folder = tmp_path_factory.mktemp("mcp") / "library"
    with Library(folder) as lib:
        report = lib.add(*(PDFS / f for f in FILINGS), DEMO)
    assert not report.skipped, report.skipped
    return folder


@pytest.fixture
def library(built_library: Path, tmp_path: Path) -> Path:
    """A copy of the built library for each test: a test that adds a document leaves the others' list as it was."""
    return Path(shutil.copytree(built_library, tmp_path / "library"))


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A folder the server may add from (with a report in it), and a file outside it."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "harbor-2025.md").write_text(
        "# Harbor Logistics annual report 2025\n\nHarbor Logistics moved 1.2 million containers in 2025.\n"
    )
    outside = tmp_path / "secret.md"
    outside.write_text("# Not to be added\n\nThis file lies outside the folders the server was given.\n")
    return inbox, outside


def environment() -> dict[str, str]:
    """What the server needs of this test session's environment: no remote model, the session's settings."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("MINIONS_", "XDG_", "HF_"))}
    env.pop("MINIONS_REMOTE", None)
    return env


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    content = result.structured_content
    return content["result"] if isinstance(content, dict) and set(content) == {"result"} else content


async def page_text(client: Client, uri: str) -> str:
    (page,) = (await client.read_resource(uri)).contents
    assert isinstance(page, TextResourceContents)
    return page.text


def error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return " ".join(c.text for c in result.content)


async def talk_to(client: Client, inbox: Path, outside: Path) -> dict[str, Any]:
    """What the issue asks of a client, in one session; what ``ask`` answered, for the egress test."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"search", "ask", "list_documents", "add"}
    assert all(t.description and t.input_schema["type"] == "object" for t in tools.values())
    assert set(tools["ask"].input_schema["properties"]) == {"question", "documents", "protocol"}

    documents = structured(await client.call_tool("list_documents", {}))
    assert {d["name"] for d in documents} == {*FILINGS, DEMO.name}
    ulta = next(d for d in documents if d["name"] == FILINGS[0])
    assert ulta["pages"] > 3 and ulta["bytes"] > 0 and ulta["chunks"] > 0 and ulta["indexed"] == "words"

    found = structured(await client.call_tool("search", {"question": ULTA, "k": 3}))
    first = found["passages"][0]
    assert (first["document"], first["page"]) == (FILINGS[0], 3) and len(found["passages"]) == 3
    assert "47 new stores" in first["text"] and first["score"] > 0
    assert "47 new stores" in await page_text(client, first["resource"])

    answer = structured(await client.call_tool("ask", {"question": DEMO_QUESTION}))
    assert "$31.8 million" in answer["answer"]
    cited = answer["citations"][0]
    assert (cited["document"], cited["line"]) == (DEMO.name, 27) and "$31.8 million" in cited["text"]
    assert answer["egress"] == [] and answer["left_device"] == "nothing left this device"
    assert answer["usage"]["local"]["calls"] > 0 and answer["cost_usd"] == 0
    assert cited["text"] in await page_text(client, cited["resource"])

    # bad inputs: a tool error that says what to do, and the server goes on
    empty = error_text(await client.call_tool("ask", {"question": "  "}))
    assert "The question is empty" in empty
    assert "The question is empty" in error_text(await client.call_tool("search", {"question": ""}))
    unknown = error_text(await client.call_tool("search", {"question": ULTA, "documents": ["NOPE_2023_10K.pdf"]}))
    assert "No document 'NOPE_2023_10K.pdf'" in unknown and FILINGS[0] in unknown
    unknown = error_text(await client.call_tool("ask", {"question": ULTA, "documents": ["NOPE_2023_10K.pdf"]}))
    assert "No document 'NOPE_2023_10K.pdf'" in unknown
    refused = error_text(await client.call_tool("add", {"paths": [str(outside)]}))
    assert "outside the folders this server may read" in refused and "--allow FOLDER" in refused
    assert "not an absolute path" in error_text(await client.call_tool("add", {"paths": ["secret.md"]}))
    remote = error_text(await client.call_tool("ask", {"question": DEMO_QUESTION, "protocol": "minions"}))
    assert "needs a remote model" in remote and "--remote" in remote
    assert "k" in error_text(await client.call_tool("search", {"question": ULTA, "k": 0}))
    with pytest.raises(Exception, match="pages 1 to"):
        await client.read_resource(page_uri(FILINGS[0], 999))

    reported: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    added = structured(await client.call_tool("add", {"paths": [str(inbox)]}, progress_callback=on_progress))
    assert added["added"] == ["harbor-2025.md"] and added["documents"] == len(FILINGS) + 2
    assert reported == [(1, 1, "harbor-2025.md: added")]
    found = structured(await client.call_tool("search", {"question": "How many containers did Harbor move?"}))
    assert found["passages"][0]["document"] == "harbor-2025.md"
    return answer


def test_over_stdio(library: Path, folders: tuple[Path, Path]) -> None:
    inbox, outside = folders
    command = ["-m", "minions", "mcp", "--library", str(library), "--allow", str(inbox)]
    server = StdioServerParameters(command=sys.executable, args=command, env=environment(), cwd=str(ROOT))

    async def session() -> None:
        async with Client(server, read_timeout_seconds=START_S) as client:
            await talk_to(client, inbox, outside)

    anyio.run(session)


class Served:
    """``minions mcp --http`` on a free port of 127.0.0.1, its stderr read line by line."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        command = [sys.executable, "-m", "minions", "mcp", "--http", "--port", str(self.port), *args]
        self.process = subprocess.Popen(
            command, env=environment(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stderr or ():
            self.lines.put(line)

    def line_with(self, text: str) -> str:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.process.poll() is None, f"minions mcp exited with {self.process.returncode}"
                continue
            if text in line:
                return line
        pytest.fail(f"minions mcp printed no line with {text!r}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        assert self.process.wait(timeout=30) == 0


@pytest.fixture
def served(library: Path, folders: tuple[Path, Path]) -> Iterator[Served]:
    server = Served("--library", str(library), "--allow", str(folders[0]))
    server.line_with("minions mcp on http://127.0.0.1")
    yield server
    server.stop()


def test_over_streamable_http_on_loopback(served: Served, folders: tuple[Path, Path]) -> None:
    async def session() -> None:
        async with Client(served.url, read_timeout_seconds=START_S) as client:
            await talk_to(client, *folders)

    anyio.run(session)


def test_streamable_http_has_the_checks_and_limits_of_minions_serve(served: Served) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream"}
    as_json = {**headers, "content-type": "application/json"}
    rebound = httpx.post(served.url, json=hello, headers={**headers, "host": "evil.example:80"})
    assert rebound.status_code == 403 and "loopback" in rebound.json()["error"]["message"]
    crossed = httpx.post(served.url, json=hello, headers={**headers, "origin": "http://evil.example"})
    assert crossed.status_code == 403 and "Cross-origin" in crossed.json()["error"]["message"]
    big = httpx.post(served.url, content=b"[" * (17 * 1024 * 1024), headers=as_json)
    assert big.status_code == 413
    deep = httpx.post(served.url, content=b"[" * 40 + b"]" * 40, headers=as_json)
    assert deep.status_code == 400 and deep.json()["error"]["code"] == "too_deep"


def test_off_loopback_it_needs_a_token(library: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "minions", "mcp", "--library", str(library),
         "--http", "--host", "0.0.0.0"],  # refused: binds nothing
        env=environment(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "without a token" in proc.stderr


def test_a_watched_folder_is_kept_in_sync_while_it_serves(library: Path, tmp_path: Path) -> None:
    watched = tmp_path / "watched"
    watched.mkdir()
    server = Served("--library", str(library), "--watch", str(watched))
    try:
        server.line_with("minions mcp on http://127.0.0.1")
        (watched / "notes.md").write_text("# Notes\n\nThe board approved the Rotterdam warehouse in March.\n")
        assert "notes.md  added" in server.line_with("notes.md")

        async def session() -> None:
            async with Client(server.url, read_timeout_seconds=START_S) as client:
                found = structured(await client.call_tool("search", {"question": "Rotterdam warehouse"}))
                assert found["passages"][0]["document"] == "notes.md"

        anyio.run(session)
    finally:
        server.stop()


BUDGET = "5000"
"""Remote tokens per question in the egress test: the first request's prompt and a short reply, not a retry (the
library's ten best chunks, the routed report's five and five of the other documents', lifted less: 4,229 counted)."""
REMOTE_S = 500
"""How long the egress test's stand-in remote may take a request (``MINIONS_REMOTE_TIMEOUT``), under the test's."""


def test_a_question_through_mcp_leaves_the_egress_log_a_cli_question_leaves(library: Path, openai_server: str) -> None:
    """The remote model is llama.cpp's server on loopback: what the ``rag`` protocol sends it is recorded, and
    the same question asked by ``minions ask --library`` and by the MCP tool, each with the same budget per
    question, records the same messages.

    A stand-in remote of 135M parameters may write no reply that validates; asking again would overrun the budget,
    so the run stops there (one request), alike both ways, and the MCP tool still says what left the device, as
    the CLI's JSON does."""
    remote = f"openai-compatible/smollm2@{openai_server}"
    question = DEMO_QUESTION
    # the stand-in's 4k-token prompt on a busy 2-core machine can outlast the default 120 s a request may take, and
    # one way timing out where the other did not would record different things: what is compared is the record
    env = environment() | {"MINIONS_REMOTE_TIMEOUT": str(REMOTE_S)}
    cli = subprocess.run(
        [sys.executable, "-m", "minions", "ask", question, "--library", str(library), "--protocol", "rag",
         "--remote", remote, "--budget-tokens", BUDGET, "--json"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=2 * START_S, check=False,
    )  # fmt: skip
    by_cli = json.loads(cli.stdout)
    assert cli.returncode == (2 if by_cli["error"] else 0), cli.stderr[-2000:]
    command = ["-m", "minions", "mcp", "--library", str(library), "--remote", remote, "--budget-tokens", BUDGET]
    server = StdioServerParameters(command=sys.executable, args=command, env=env, cwd=str(ROOT))

    async def session() -> dict[str, Any]:
        async with Client(server, read_timeout_seconds=2 * START_S) as client:
            return structured(await client.call_tool("ask", {"question": question, "protocol": "rag"}))

    by_mcp = anyio.run(session)
    assert (by_mcp["answer"], by_mcp["complete"]) == (by_cli["answer"], by_cli["complete"])
    assert by_cli["egress"] and by_mcp["egress"] == by_cli["egress"], (
        by_cli["error"],
        by_cli["notes"],
        cli.stderr[-1500:],
    )
    assert any(question in record["text"] for record in by_mcp["egress"])
    assert by_cli["error"] is None or any(by_cli["error"] in note for note in by_mcp["notes"])
    spent = by_mcp["usage"]["remote"]
    assert spent["calls"] >= 1 and spent["prompt_tokens"] + spent["completion_tokens"] <= int(BUDGET)


def test_a_watched_folder_serves_nothing_a_link_leads_to_outside_it(tmp_path: Path) -> None:
    """Links out of a ``--watch`` folder (a file, a folder, one made while it serves, a file swapped for one) are
    never read: no search passage, document or ``add`` holds what they lead to, and ``add`` says why it skipped."""
    watched, outside = tmp_path / "watched", tmp_path / "outside"
    watched.mkdir()
    outside.mkdir()
    (watched / "inside.md").write_text("# Inside\n\nThe board approved the Rotterdam warehouse in March.\n")
    (watched / "swapped.md").write_text("# Swapped\n\nThe quay in Antwerp was dredged in May.\n")
    (outside / "secret.md").write_text("# Secret\n\nThe walrus ledger is kept in the vault.\n")
    (outside / "later.md").write_text("# Later\n\nThe narwhal ledger is kept in the attic.\n")
    os.symlink(outside / "secret.md", watched / "file-link.md")
    os.symlink(outside, watched / "folder-link")
    server = Served("--library", str(tmp_path / "library"), "--watch", str(watched))

    async def documents(client: Client) -> set[str]:
        return {d["name"] for d in structured(await client.call_tool("list_documents", {}))}

    async def until(client: Client, done: Any) -> None:
        deadline = time.monotonic() + 30
        while not done(await documents(client)):
            assert time.monotonic() < deadline, await documents(client)
            await anyio.sleep(0.2)

    async def session() -> None:
        async with Client(server.url, read_timeout_seconds=START_S) as client:
            await until(client, lambda names: {"inside.md", "swapped.md"} <= names)
            os.symlink(outside / "later.md", watched / "made-later.md")
            os.symlink(outside, watched / "folder-made-later")
            (watched / "swapped.md").unlink()
            os.symlink(outside / "later.md", watched / "swapped.md")
            (watched / "omega.md").write_text("# Omega\n\nThe orange groves were sold.\n")
            await until(client, lambda names: "omega.md" in names and "swapped.md" not in names)
            for question in ["walrus ledger vault", "narwhal ledger attic"]:
                found = structured(await client.call_tool("search", {"question": question}))
                assert not any("ledger" in p["text"] for p in found["passages"]), found
            assert await documents(client) == {"inside.md", "omega.md"}
            added = structured(await client.call_tool("add", {"paths": [str(watched)]}))
            skipped = {Path(s["file"]).name: s["why"] for s in added["skipped"]}
            assert set(skipped) == {"file-link.md", "folder-link", "made-later.md", "folder-made-later", "swapped.md"}
            assert all("leads outside the folders that may be read" in why for why in skipped.values())
            refused = error_text(await client.call_tool("add", {"paths": [str(watched / "file-link.md")]}))
            assert "outside the folders this server may read" in refused
            assert await documents(client) == {"inside.md", "omega.md"}

    try:
        server.line_with("minions mcp on http://127.0.0.1")
        anyio.run(session)
    finally:
        server.stop()
