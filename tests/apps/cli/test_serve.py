"""``minions app`` and ``minions serve`` from the command line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from minions.apps.cli.main import build_parser, main

from ..conftest import free_port


def test_both_commands_are_in_the_cli_with_loopback_defaults() -> None:
    parser = build_parser()
    app = parser.parse_args(["app"])
    serve = parser.parse_args(["serve", "--port", "9000", "--remote", "openai/gpt-4o-mini"])
    assert (app.host, app.port, app.token) == ("127.0.0.1", 8765, None)
    assert (serve.host, serve.port, serve.remote) == ("127.0.0.1", 9000, "openai/gpt-4o-mini")


def test_listening_beyond_loopback_without_a_token_refuses_to_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MINIONS_APP_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path)]) == 2  # refused: binds nothing
    err = capsys.readouterr().err
    assert "Refusing to listen on 0.0.0.0 without a token" in err and "MINIONS_APP_TOKEN" in err


@pytest.mark.slow
def test_serve_answers_the_openai_models_route(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MINIONS_APP_TOKEN", "MINIONS_REMOTE")}
    command = [sys.executable, "-m", "minions", "serve", "--port", str(port), "--data-dir", str(tmp_path)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "minions serve did not answer within 60 s"
                time.sleep(0.2)
        assert [m["id"] for m in response.json()["data"]] == ["local"]  # no remote model: the others cannot run
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 404  # serve has no chat page
    finally:
        process.terminate()
        process.wait(timeout=10)


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``minions ARGV``: exit status 2, nothing on stdout (nothing claims to serve), one line on stderr."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minions: error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_port_in_use_is_one_line_before_anything_says_it_serves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(capsys, ["serve", "--port", str(port), "--data-dir", str(tmp_path)])
    assert f"Port {port} on 127.0.0.1 is in use" in line and "--port" in line


@pytest.mark.parametrize("env", ["data", "cache"])
def test_a_folder_that_cannot_be_created_is_one_line(
    env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    data = blocker / "data" if env == "data" else tmp_path / "data"
    if env == "cache":
        monkeypatch.setenv("MINIONS_CACHE_DIR", str(blocker / "cache"))
    line = one_line_error(capsys, ["serve", "--port", str(free_port()), "--data-dir", str(data)])
    fix = "pass --data-dir or set MINIONS_APP_DIR" if env == "data" else "set MINIONS_CACHE_DIR"
    assert f"Cannot write to {blocker}/{env} (Not a directory): {fix}" in line
    if env == "cache":  # and the same for a question
        line = one_line_error(capsys, ["ask", str(blocker), "What?"])
        assert "set MINIONS_CACHE_DIR" in line


def test_a_model_file_that_cannot_be_used_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"not a model")
    argv = ["serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "data"), "--local"]
    assert "is not a GGUF model file" in one_line_error(capsys, [*argv, f"llamacpp/{not_gguf}"])
    assert "does not exist" in one_line_error(capsys, [*argv, f"llamacpp/{tmp_path / 'missing.gguf'}"])
