"""The CLI's contract for bad input: one line that says what to do, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from minions.apps.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "northwind-annual-report-2025.md"


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


def test_missing_file(capsys, tmp_path, monkeypatch) -> None:
    """Said in one line before any model is touched: with an empty cache, as on a new machine, the embedded model
    is not converted first."""
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = run_cli(capsys, "ask", str(tmp_path / "nope.pdf"), "what?")
    assert_one_line_error(code, err, "nope.pdf")
    assert not (tmp_path / "cache" / "models").exists()


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
        [sys.executable, "-m", "minions", "--debug", "ask", str(tmp_path / "x.txt"), "q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "minions", "ask", str(tmp_path / "x.txt"), "q"],
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


def writer(text: str) -> Any:
    """A local model of 3B parameters (by its name) whose jobs find the demo's revenue sentence, and that writes
    ``text`` when asked to answer from its quotes."""
    from minions.backends.scripted import ScriptedBackend
    from minions.protocols.prompts import render
    from tests.protocols.helpers import quote_reply

    def reply(messages: list[Any], params: Any) -> str:
        if messages[0].content == render("written_system"):
            return text
        return quote_reply(params, "Total revenue for 2025", "$31.8 million")

    return ScriptedBackend("scriptedw/llama3.2:3b", responder=reply)


def ask_writer(capsys, monkeypatch, register_provider, text: str, *flags: str) -> str:
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    register_provider("scriptedw", lambda model: writer(text))
    question = "What was total revenue for 2025?"
    code, out, _ = run_cli(capsys, "ask", str(EXAMPLE), question, "--local", "scriptedw/llama3.2:3b", *flags)
    assert code == 0
    return out


def test_ask_prints_a_written_answer_once_as_it_comes_with_its_numbered_citations(
    capsys, monkeypatch, register_provider
) -> None:
    out = ask_writer(capsys, monkeypatch, register_provider, "Total revenue for 2025 was $31.8 million [1].")
    assert out.startswith("Total revenue for 2025 was $31.8 million [1].\n")
    assert out.count("$31.8 million [1]") == 1 and "  [1] [northwind-annual-report-2025.md line 27] " in out


def test_ask_says_why_a_written_answer_is_replaced_and_prints_the_quote_answer(
    capsys, monkeypatch, register_provider
) -> None:
    out = ask_writer(capsys, monkeypatch, register_provider, "Total revenue for 2025 was $42 million [1].")
    written, why, quote = out.splitlines()[:3]
    assert written == "Total revenue for 2025 was $42 million [1]."
    assert why == "not kept: '$42 million' is not in the quotes it cites; the quote answer:"
    assert quote == "$31.8 million, according to northwind-annual-report-2025.md, line 27:"
    assert "note: The local model's written answer was replaced" not in out  # said once, above


def test_ask_answer_quote_keeps_a_capable_model_to_its_quote(capsys, monkeypatch, register_provider) -> None:
    out = ask_writer(capsys, monkeypatch, register_provider, "never asked", "--answer", "quote")
    assert out.startswith("$31.8 million, according to northwind-annual-report-2025.md, line 27:")
    assert "never asked" not in out and "  [northwind-annual-report-2025.md line 27] " in out


def test_cache_says_what_the_vector_cache_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from minions.protocols.search.meaning import VectorCache

    from ...protocols.helpers import WordsEmbedder

    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MINIONS_LIBRARY", str(tmp_path / "no library"))
    path = tmp_path / "cache" / "vectors.sqlite"
    VectorCache(path).vectors(WordsEmbedder(["sentence"]), ["A sentence a search weighed."])  # type: ignore[arg-type]
    code, out, _ = run_cli(capsys, "cache", "--json")
    vectors = json.loads(out)["vector_cache"]
    assert code == 0 and vectors["path"] == str(path) and vectors["bytes"] >= path.stat().st_size > 0
    code, out, _ = run_cli(capsys, "cache")
    assert code == 0 and f"MB in {path}" in out
