"""The CLI's contract for bad input: one line that says what to do, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from minions.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "northwind-annual-report-2025.md"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minions: error: "), err
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_file(capsys, tmp_path) -> None:
    code, _, err = run_cli(capsys, "ask", str(tmp_path / "nope.pdf"), "what?")
    assert_one_line_error(code, err, "nope.pdf")


def test_empty_document(capsys, tmp_path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("   \n")
    code, _, err = run_cli(capsys, "ask", str(empty), "what?")
    assert_one_line_error(code, err, "empty.txt")


def test_corrupt_pdf(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4 this is not really a pdf")
    code, _, err = run_cli(capsys, "ask", str(bad), "what?")
    assert_one_line_error(code, err, "bad.pdf")


def test_unknown_provider(capsys) -> None:
    code, _, err = run_cli(capsys, "ask", str(EXAMPLE), "what?", "--remote", "nosuch/model")
    assert_one_line_error(code, err, "nosuch", "provider/model")


def test_missing_api_key(capsys, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, _, err = run_cli(
        capsys, "ask", str(EXAMPLE), "what?", "--protocol", "remote", "--remote", "openai/gpt-4o-mini"
    )
    assert_one_line_error(code, err, "OPENAI_API_KEY")


def test_refused_connection(capsys) -> None:
    code, _, err = run_cli(
        capsys,
        "ask",
        str(EXAMPLE),
        "what?",
        "--protocol",
        "remote",
        "--remote",
        "openai-compatible/m@http://127.0.0.1:9/v1",
    )
    assert_one_line_error(code, err, "127.0.0.1:9")


@pytest.mark.parametrize("protocol", ["minions", "rag"])
def test_a_protocol_that_needs_a_remote_model_without_one(capsys, monkeypatch, protocol) -> None:
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    code, _, err = run_cli(capsys, "ask", str(EXAMPLE), "what?", "--protocol", protocol)
    assert_one_line_error(
        code,
        err,
        f"The {protocol} protocol needs a remote model: pass --remote provider/model or set MINIONS_REMOTE, "
        "or use --protocol local.",
    )


def test_no_question(capsys) -> None:
    code, _, err = run_cli(capsys, "ask", str(EXAMPLE), "  ")
    assert_one_line_error(code, err, "question")


def test_debug_shows_the_traceback(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "minions.cli", "--debug", "ask", str(tmp_path / "x.txt"), "q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "minions.cli", "ask", str(tmp_path / "x.txt"), "q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_a_failure_of_ours_is_one_line_too(capsys, monkeypatch) -> None:
    import minions.documents

    def broken(paths):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(minions.documents, "load_documents", broken)
    code, _, err = run_cli(capsys, "ask", str(EXAMPLE), "What was revenue?", "--protocol", "local")
    assert code == 1 and err.strip() == (
        "minions: internal error: RuntimeError: a bug of ours (--debug shows the traceback)"
    )
