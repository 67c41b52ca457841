"""llama.cpp's log, silent unless ``MINIONS_LLAMA_VERBOSE`` or ``--debug``: the demo opens with its answer, after
the one line that says the model is converted on its first use."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minions.backends.llamacpp.ffi import VERBOSE_ENV, llama_verbose
from minions.paths import cache_dir

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "northwind-annual-report-2025.md"
QUESTION = "What was Northwind's total revenue in 2025?"
FALLBACK = "falling back to"
"""What llama.cpp says when it converts the embedded model to Q4_0 (one tensor takes q8_0 instead)."""


def _cache_without_models(tmp_path: Path) -> Path:
    """A cache folder that shares everything with this machine's but the converted models, so the Q4_0 copy is
    made again (in about a second) and the cost tables are not measured again."""
    fresh = tmp_path / "cache"
    fresh.mkdir()
    for entry in cache_dir().iterdir() if cache_dir().is_dir() else ():
        if entry.name != "models":
            (fresh / entry.name).symlink_to(entry)
    return fresh


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != VERBOSE_ENV}
    return {**env, "MINIONS_CACHE_DIR": str(cache), **extra}


@pytest.mark.parametrize(
    ("value", "debug", "expected"),
    [("", False, False), ("", True, True), ("1", False, True), ("0", True, False), ("yes", False, True)],
)
def test_verbose_is_the_variable_else_debug_logging(monkeypatch, value, debug, expected) -> None:
    monkeypatch.setenv(VERBOSE_ENV, value)
    logger = logging.getLogger("minions.backends.llamacpp.ffi")
    before = logger.level
    logger.setLevel(logging.DEBUG if debug else logging.ERROR)  # setLevel, which clears the logger's cache
    try:
        assert llama_verbose() is expected
    finally:
        logger.setLevel(before)


@pytest.mark.slow
def test_the_demo_starts_with_its_answer(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "minions", "ask", str(DEMO), QUESTION],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        env=_env(_cache_without_models(tmp_path)),
    )
    assert proc.returncode == 0, proc.stdout
    assert (tmp_path / "cache" / "models").is_dir(), "the model was not converted again"
    setup, first = proc.stdout.splitlines()[:2]
    assert setup.startswith("minions: converting SmolLM2-135M-Instruct"), proc.stdout[:2000]  # its one line
    assert first == f"According to {DEMO.name}, line 27:", proc.stdout[:2000]
    assert "$31.8 million" in proc.stdout
    assert FALLBACK not in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [True, False])
def test_the_conversion_warnings_show_only_when_asked(tmp_path, verbose) -> None:
    code = "from minions.backends.llamacpp.quantize import default_local_model; default_local_model()"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(_cache_without_models(tmp_path), **({VERBOSE_ENV: "1"} if verbose else {})),
    )
    assert proc.returncode == 0, proc.stderr
    assert (FALLBACK in proc.stderr) is verbose, proc.stderr[-2000:]
