"""Benchmark data is found through ``--data`` or ``$MINIONS_DATA``, never through a path of one machine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from minions.errors import ConfigError
from minions.paths import DATA_ENV, benchmark_data

from ..apps.cli.test_main import assert_one_line_error, run_cli
from .doc_helpers import make_pdf

SERVER = "openai-compatible/m@http://127.0.0.1:9/v1"  # never called: the data is missing first
MODELS = ("--local", SERVER, "--remote", SERVER)


@pytest.fixture
def no_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_ENV, raising=False)


def test_data_comes_from_the_flag_then_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "all"))
    assert benchmark_data("leval", tmp_path / "mine") == tmp_path / "mine"
    assert benchmark_data("leval") == tmp_path / "all" / "leval"


def test_with_neither_the_error_says_what_to_pass(no_data) -> None:
    with pytest.raises(ConfigError, match=r"No qasper data: pass --data PATH \(the JSON file\), or set MINIONS_DATA"):
        benchmark_data("qasper", None, expected="the JSON file")


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "evidence", "--lexical-only"),
        ("bench", "engine"),
        ("bench", "speculative"),
        ("bench", "cost", *MODELS),
        ("eval", "run", "financebench", *MODELS, "--out", "x.jsonl"),
    ],
)
def test_benchmarks_without_data_say_to_pass_it(capsys, no_data, argv) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, "financebench data: pass --data PATH", f"or set {DATA_ENV}")


def test_bench_pdf_finds_a_bare_name_under_the_data_folder(capsys, tmp_path, monkeypatch) -> None:
    pdfs = tmp_path / "financebench" / "pdfs"
    pdfs.mkdir(parents=True)
    (pdfs / "two.pdf").write_bytes(make_pdf(["one", "two"]))
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    code, out, _ = run_cli(capsys, "bench", "pdf", "two.pdf", "--pypdf-pages", "0")
    assert code == 0 and json.loads(out)["pages"] == 2


def test_the_library_names_no_machine_path() -> None:
    root = Path(__file__).resolve().parents[2]
    library = [p for d in ("minions", "backends", "protocols", "evals", "apps") for p in (root / d).rglob("*.py")]
    named = [str(p.relative_to(root)) for p in library if re.search(r"shared/data|/work/", p.read_text())]
    assert named == []
