"""Questions of one's own over a folder of documents (``evals.folder``), on a small library made here, and the
frozen sets of ``evals/bench/written/`` checked against the list of their documents."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from minions.evals import DatasetLayoutError, load_dataset
from minions.evals.items import HALVES, half

WRITTEN = Path(__file__).resolve().parents[2] / "evals" / "bench" / "written"
FROZEN = ("mixed.jsonl", "german-de.jsonl", "german-en.jsonl")

LICENCE = "Permission is granted to copy this notice.\n\nYou may charge a reasonable fee for copies of the Package.\n"
MANUAL = "NAME\n  shorten\n\nDESCRIPTION\n    Remove the columns of each line\n    starting with the first.\n"
OTHER = "Nothing here answers anything; it only makes the library larger.\n"


def write_set(root: Path, records: list[dict[str, object]]) -> Path:
    """A folder ``root/lib`` of three documents (one no question names) and a questions file of ``records``."""
    for path, text in (("legal/fee.txt", LICENCE), ("manuals/shorten.1.txt", MANUAL), ("noise.txt", OTHER)):
        (root / "lib" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "lib" / path).write_text(text, encoding="utf-8")
    questions = root / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return questions


def record(n: int, document: str, evidence: list[str], kind: str) -> dict[str, object]:
    return {"id": f"q{n}", "folder": "lib", "document": document, "question": f"question {n}", "answer": "",
            "evidence": evidence, "kind": kind}  # fmt: skip


FEE = record(1, "legal/fee.txt", ["You may charge a reasonable fee"], "legal")
COLUMNS = record(2, "manuals/shorten.1.txt", ["Remove the columns of each line starting with the first."], "manuals")


def test_quotes_are_placed_in_their_documents_and_the_library_is_the_whole_folder(tmp_path: Path) -> None:
    ds = load_dataset("folder", tmp_path, questions=str(write_set(tmp_path, [FEE, COLUMNS])))
    assert ds.name == "folder" and ds.library == (str(tmp_path / "lib"),) and not ds.skipped
    fee, columns = ds.items
    (place,) = fee.evidence[0]
    (doc,) = fee.documents()
    assert doc.name == place.document == "fee.txt" and doc.text[place.start : place.end] == FEE["evidence"][0]
    # a quote across a line break is found loosely: it spans from its first letter to its last
    (place,) = columns.evidence[0]
    spanned = columns.documents()[0].text[place.start : place.end]
    assert spanned == "Remove the columns of each line\n    starting with the first"
    assert (fee.metadata["kind"], columns.metadata["kind"]) == ("legal", "manuals")


def test_a_passage_that_other_documents_hold_too_is_found_in_any_of_them(tmp_path: Path) -> None:
    questions = write_set(tmp_path, [FEE, COLUMNS])
    (tmp_path / "lib" / "quoted.txt").write_text("The package's terms, quoted:\n" + LICENCE, encoding="utf-8")
    fee, columns = load_dataset("folder", tmp_path, questions=str(questions)).items
    assert [[p.document for p in places] for places in fee.evidence] == [["fee.txt"], ["quoted.txt"]]
    assert len(columns.evidence) == 1  # its own document alone holds its quote


def test_a_question_whose_document_or_quote_is_not_there_is_skipped_with_the_reason(tmp_path: Path, caplog) -> None:
    missing = record(3, "legal/gone.txt", ["anything"], "legal")
    edited = record(4, "legal/fee.txt", ["You may charge a reasonable fee", "a sentence it does not hold"], "legal")
    with caplog.at_level(logging.WARNING, logger="minions.evals"):
        ds = load_dataset("folder", tmp_path, questions=str(write_set(tmp_path, [FEE, missing, edited])))
    assert [i.id for i in ds.items] == ["q1"] and set(ds.skipped) == {"q3", "q4"}
    assert ds.skipped["q3"].startswith("no document") and "1 of its 2 quotes not in legal/fee.txt" in ds.skipped["q4"]
    assert "skipped 2 of 3 questions" in caplog.text


def test_the_layout_errors_say_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(DatasetLayoutError, match="pass --questions FILE"):
        load_dataset("folder", tmp_path)
    questions = write_set(tmp_path, [dict(FEE, folder="elsewhere")])
    with pytest.raises(DatasetLayoutError, match=r"no folder .*elsewhere: lay the documents out"):
        load_dataset("folder", tmp_path, questions=str(questions))
    unquoted = {"id": "x", "folder": "lib", "document": "noise.txt", "question": "q"}
    with pytest.raises(DatasetLayoutError, match="lacks evidence"):
        load_dataset("folder", tmp_path, questions=str(write_set(tmp_path, [unquoted])))


def test_halves_are_fixed_by_the_id_alone() -> None:
    ids = [f"financebench_id_{n:05d}" for n in range(200)]
    halves = [half(i) for i in ids]
    assert halves == [half(i) for i in ids] and set(halves) == set(HALVES)
    assert 70 <= halves.count("A") <= 130  # a hash splits about evenly
    assert half("financebench_id_03029") == "B" and half("financebench_id_00807") == "A"  # frozen: never changes


def _manifest() -> dict[str, str]:
    rows = [line.split("\t") for line in (WRITTEN / "search-sets.tsv").read_text().splitlines() if line[:1] != "#"]
    return {path: sha for path, _package, _source, sha in rows}


def test_the_frozen_sets_name_documents_of_their_list() -> None:
    """Every question of the frozen sets names a document that ``scripts/make-search-sets`` lays out, and the
    file names under each folder differ (the library names a document by its file name)."""
    listed = _manifest()
    assert len(listed) == 463 and all(len(sha) == 64 for sha in listed.values())
    folders = Counter(path.split("/")[0] if path.startswith("mixed/") else path.rsplit("/", 1)[0] for path in listed)
    assert folders == {"mixed": 343, "german/de": 60, "german/en": 60}
    for folder in folders:
        names = [p.rsplit("/", 1)[1] for p in listed if p.startswith(folder + "/")]
        assert len(names) == len(set(names)), folder
    sizes = {}
    for name in FROZEN:
        records = [json.loads(line) for line in (WRITTEN / name).read_text(encoding="utf-8").splitlines()]
        assert len({r["id"] for r in records}) == len(records)
        assert all(f"{r['folder']}/{r['document']}" in listed and r["evidence"] for r in records), name
        sizes[name] = Counter(r["kind"] for r in records)
    assert sizes["mixed.jsonl"] == {"manuals": 21, "legal": 14, "other": 10}
    assert sizes["german-de.jsonl"] == {"de": 21} and sizes["german-en.jsonl"] == {"en": 21}
    german, english = ([json.loads(line) for line in (WRITTEN / n).read_text().splitlines()] for n in FROZEN[1:])
    assert [r["document"] for r in german] == [r["document"] for r in english]  # the same facts, page by page


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make-search-sets"
TINY_PAGE = b".TH TINY 1\n.SH NAME\ntiny \\- trims lines\n.SH DESCRIPTION\nRemove the columns of each line.\n"


@pytest.mark.skipif(not (shutil.which("man") and shutil.which("col")), reason="man-db is not installed")
def test_the_documents_are_laid_out_from_their_list_and_checked_against_their_digests(tmp_path: Path) -> None:
    """``scripts/make-search-sets``: a manual page rendered to plain text and a file copied, each checked against
    the digest its list froze; a text that differs is written and listed (exit 2), a source not installed names the
    package to install (exit 1)."""
    page = tmp_path / "share" / "man" / "man1" / "tiny.1.gz"
    page.parent.mkdir(parents=True)
    page.write_bytes(gzip.compress(TINY_PAGE))
    (tmp_path / "NOTICE").write_text("Some terms.\r\n\r\n", encoding="utf-8")
    listed = [("set/tiny.1.txt", "tiny-man", str(page)), ("set/notice.txt", "tiny-doc", str(tmp_path / "NOTICE"))]

    def run(digests: list[str]) -> subprocess.CompletedProcess[str]:
        manifest = tmp_path / "list.tsv"
        rows = ["\t".join((*row, sha)) for row, sha in zip(listed, digests, strict=True)]
        manifest.write_text("# path\tpackage\tsource\tsha256\n" + "\n".join(rows) + "\n", encoding="utf-8")
        command = [sys.executable, str(SCRIPT), str(tmp_path / "out"), "--manifest", str(manifest)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    first = run(["0" * 64, "0" * 64])
    assert first.returncode == 2 and "2 differ" in first.stdout and "differs: set/tiny.1.txt" in first.stdout
    rendered = (tmp_path / "out" / "set" / "tiny.1.txt").read_text(encoding="utf-8")
    assert "trims lines" in rendered and "Remove the columns of each line." in rendered and "\b" not in rendered
    assert (tmp_path / "out" / "set" / "notice.txt").read_text(encoding="utf-8") == "Some terms.\n"
    frozen = [hashlib.sha256((tmp_path / "out" / p).read_bytes()).hexdigest() for p, _, _ in listed]
    again = run(frozen)
    assert again.returncode == 0 and "2 documents written" in again.stdout and "0 differ" in again.stdout
    (tmp_path / "out" / "set" / "stale.txt").write_text("left from another list", encoding="utf-8")
    stale = run(frozen)
    assert (
        stale.returncode == 2
        and "not in the list (a library of the folder would hold it; remove it): set/stale.txt" in stale.stdout
    )
    (tmp_path / "out" / "set" / "stale.txt").unlink()
    (tmp_path / "NOTICE").unlink()
    gone = run(frozen)
    assert gone.returncode == 1 and "apt-get install -y tiny-doc" in gone.stderr
