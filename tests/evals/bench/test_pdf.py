"""``minions bench pdf``: one JSON line per file with pages and pages/s, pypdf's beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minions.apps.cli.main import main
from minions.errors import DocumentNotFoundError
from minions.evals.bench.pdf import pdf_bench
from minions.evals.financebench import filing_path, find_filing

from ...minions.doc_helpers import make_pdf


@pytest.fixture
def pdfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "pdfs"
    folder.mkdir()
    (folder / "five.pdf").write_bytes(make_pdf([f"page {i}" for i in range(1, 6)]))
    return folder


def test_bench_reports_pages_per_second_for_both_readers(pdfs: Path) -> None:
    (line,) = pdf_bench([pdfs / "five.pdf"], pypdf_pages=2)
    assert line["file"] == "five.pdf" and line["pages"] == 5 and line["pypdf_pages"] == 2
    for reader in ("", "pypdf_"):
        assert line[f"{reader}seconds"] >= 0 and line[f"{reader}pages_per_s"] > 0
    assert not (pdfs.parent / "cache").exists()  # the reader is timed, not the cache


def test_cli_prints_one_json_line_per_file(pdfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "pdf", "--data", str(pdfs.parent), "five.pdf", str(pdfs / "five.pdf"), "--pypdf-pages", "0"]
    assert main(argv) == 0
    lines = [json.loads(s) for s in capsys.readouterr().out.splitlines()]
    assert [(d["file"], d["pages"]) for d in lines] == [("five.pdf", 5)] * 2
    assert "pypdf_pages" not in lines[0]


def test_a_missing_file_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(DocumentNotFoundError, match=r"No PDF nope\.pdf \(looked at .*pdfs/nope\.pdf\): pass a path"):
        find_filing("nope.pdf", tmp_path)


def test_a_filing_is_found_by_its_doc_name_in_a_checkout_or_its_folder_of_pdfs(pdfs: Path) -> None:
    assert filing_path(pdfs.parent, "five") == filing_path(pdfs.parent, "five.pdf") == pdfs / "five.pdf"
    for data in (pdfs.parent, pdfs):  # a FinanceBench checkout, or its pdfs/ folder itself
        assert find_filing("five", data) == find_filing("five.pdf", data) == pdfs / "five.pdf"
    assert find_filing(pdfs / "five.pdf", None) == pdfs / "five.pdf"  # a path needs no data folder
