"""A local model behind OpenAI-compatible servers, the way a user points minions at one: ``minions ask`` with
``--local openai-compatible/smollm2@<url>`` on real llama-cpp-python servers started on 127.0.0.1, one server and
a fleet of two, against the embedded engine on the same machine and the same question. A server started without
log-probabilities (``--logits_all False``) takes the schema path, and no job fails.

The wall times of the three are printed (``pytest -s``), the embedded engine's without prompt states saved by an
earlier run (it saves each chunk's, and a second run over the same document computes less); the machine's load
decides them, so no test asserts them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerStarter

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "northwind-annual-report-2025.md"
QUESTION = "What was Northwind's total revenue in 2025?"
FIGURE, LINE = "$31.8 million", "line 27"
ASK_TIMEOUT_S = 600


def ask(local: str) -> tuple[dict[str, Any], float]:
    """``minions ask DEMO QUESTION --local LOCAL --json`` in a process of its own: its result and its wall time.
    The embedded engine starts with no saved prompt states (a folder of its own), as a server starts with none."""
    command = [sys.executable, "-m", "minions", "ask", str(DEMO), QUESTION, "--local", local, "--json"]
    with tempfile.TemporaryDirectory(prefix="minions-kv-") as kv:
        start = time.perf_counter()
        env = {**os.environ, "MINIONS_KV_CACHE_DIR": kv}
        done = subprocess.run(command, capture_output=True, text=True, timeout=ASK_TIMEOUT_S, cwd=ROOT, env=env)
        seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout), seconds


def assert_answers(result: dict[str, Any], local: str) -> None:
    assert FIGURE in result["answer"] and LINE in result["answer"], (local, result["answer"], result["jobs"])
    assert result["complete"] and result["jobs"] and all(job["ok"] for job in result["jobs"]), (local, result["notes"])


def read(result: dict[str, Any]) -> list[tuple[str, int]]:
    """The chunks the local model read (the others were quoted by words, past its prompt budget)."""
    return sorted((job["document"], job["chunk"]) for job in result["jobs"] if job["attempts"])


@pytest.mark.slow
def test_ask_on_one_server_and_on_a_fleet_answers_as_the_embedded_engine_does(
    openai_server: str, start_openai_server: ServerStarter
) -> None:
    embedded, embedded_s = ask("llamacpp/default")
    one, one_s = ask(f"openai-compatible/smollm2@{openai_server}")
    with start_openai_server() as (second, _):
        fleet, fleet_s = ask(f"openai-compatible/smollm2@{openai_server},{second}")
    for local, result in (("embedded", embedded), ("one server", one), ("fleet", fleet)):
        assert_answers(result, local)
    # the same jobs: a server on this device reads within the same prompt budget as the embedded engine (the rest
    # quoted by words), and every server reported log-probabilities, so its reads were scored as the engine's are
    assert read(one) == read(fleet) == read(embedded) and 0 < len(read(one)) < len(one["jobs"])
    assert all(job["score"] is not None for job in one["jobs"] + fleet["jobs"] if job["attempts"])
    print(
        f"\nminions ask, wall time: embedded {embedded_s:.1f}s, one server {one_s:.1f}s "
        f"({one_s / embedded_s:.2f}x), two-server fleet {fleet_s:.1f}s ({fleet_s / embedded_s:.2f}x)"
    )


@pytest.mark.slow
def test_ask_on_a_server_without_log_probabilities_takes_the_schema_path(start_openai_server: ServerStarter) -> None:
    """No job fails for want of log-probabilities: each picks its sentence through the JSON schema, once. (What
    SmolLM2 picks that way is what it picks on the embedded engine without scores, often "none": the 135M model
    names a line far better than it copies one.)"""
    with start_openai_server("--logits_all", "False") as (url, _):
        result, _seconds = ask(f"openai-compatible/smollm2@{url}")
    assert result["complete"] and result["jobs"] and result["error"] is None
    assert read(result) and all(job["ok"] for job in result["jobs"]), result["jobs"]
    assert all(job["score"] is None and job["attempts"] == 1 for job in result["jobs"] if job["attempts"])
    assert not any("log-probabilities" in note for note in result["notes"])
