"""The library: what an upload or a folder may add, and that nothing escapes the library."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from minions.apps.documents import (
    EARLIER_INDEX_FILE,
    AppDocuments,
    UnsupportedUploadError,
    UploadTooLargeError,
    clean_name,
)
from minions.apps.store import Store
from minions.documents import Document
from minions.errors import DocumentNotFoundError, EmptyDocumentError, OutsideFolderError, UnreadableDocumentError
from minions.protocols import library as protocols_library
from minions.protocols.library import Library

from .conftest import AppFactory
from .helpers import FACT, FILLER, make_pdf, report_pages


@pytest.fixture
def library(tmp_path: Path) -> AppDocuments:
    return AppDocuments(Store(tmp_path / "db.sqlite3"), tmp_path / "library", max_bytes=100_000)


def test_a_pdf_upload_is_stored_under_a_generated_name_and_loads_with_pages(library: AppDocuments) -> None:
    record = library.add_upload("../../etc/report.pdf", make_pdf(report_pages()))

    assert record.name == "report.pdf" and record.pages == 3 and record.source == "upload"
    stored = Path(record.path)
    assert stored.parent == library.uploads and stored.name != "report.pdf" and stored.suffix == ".pdf"
    (doc,) = library.documents()
    assert doc.name == "report.pdf" and FACT[:30] in library.page_text(record.id, 2)


def test_the_same_file_twice_is_one_document_and_equal_names_get_a_number(library: AppDocuments) -> None:
    first = library.add_upload("a.txt", b"Some text.")
    assert library.add_upload("copy.txt", b"Some text.").id == first.id
    second = library.add_upload("a.txt", b"Other text.")
    assert second.name == "a (2).txt"
    assert [d.name for d in library.documents()] == ["a.txt", "a (2).txt"]


@pytest.mark.parametrize(
    ("name", "data", "error", "message"),
    [
        ("notes.exe", b"MZ\x90\x00", UnsupportedUploadError, "unsupported file type '.exe'"),
        ("report.pdf", b"<html>not a pdf</html>", UnsupportedUploadError, "not a PDF"),
        ("notes.txt", b"\x7fELF\x02\x01\x01\x00\x00", UnsupportedUploadError, "holds a program, not text"),
        ("empty.pdf", b"", EmptyDocumentError, "empty"),
        ("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog", UnreadableDocumentError, "not a readable PDF"),
        ("big.txt", b"x" * 100_001, UploadTooLargeError, "upload limit"),
    ],
)
def test_bad_uploads_are_refused_with_a_specific_message_and_leave_nothing(
    library: AppDocuments, name: str, data: bytes, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        library.add_upload(name, data)
    assert library.records() == [] and list(library.uploads.iterdir()) == []


def test_display_names_lose_paths_and_control_characters() -> None:
    assert clean_name("C:\\Users\\me\\q3.pdf") == "q3.pdf"
    assert clean_name("../../.bashrc") == "bashrc"
    assert clean_name("a\x00b\nc.txt") == "abc.txt"
    assert clean_name("") == "document"


def test_a_folder_adds_supported_files_and_never_follows_links_outside(library: AppDocuments, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "q3.md").write_text("# Q3\n\nSales grew.")
    (folder / "report.pdf").write_bytes(make_pdf(report_pages()))
    (folder / "script.sh").write_text("rm -rf /")
    (folder / ".hidden.txt").write_text("hidden")
    (folder / "fake.pdf").write_text("not a pdf")
    outside = tmp_path / "secret.txt"
    outside.write_text("a secret outside the folder")
    os.symlink(outside, folder / "link.txt")
    os.symlink(tmp_path, folder / "up")  # a symlinked folder is not entered
    os.symlink(folder / "sub" / "q3.md", folder / "inside-link.md")

    report = library.add_folder(str(folder))

    # The link inside the folder is followed (it reads sub/q3.md, added once, under the name met first).
    assert sorted(d.name for d in report.added) == ["inside-link.md", "report.pdf"]
    skipped = dict(report.skipped)
    assert "leads outside the folders that may be read" in skipped["link.txt"]
    assert "not a PDF" in skipped["fake.pdf"]
    assert "already in the library as inside-link.md" in skipped["sub/q3.md"]
    assert "script.sh" not in skipped and ".hidden.txt" not in skipped
    assert all("secret" not in d.text for d in library.documents())
    assert {Path(d.path) for d in report.added} <= set(folder.resolve().rglob("*"))
    assert list(library.uploads.iterdir()) == []  # folder files are read in place, not copied


@pytest.mark.parametrize("path", ["", "relative/folder", "/no/such/folder"])
def test_a_folder_must_be_an_existing_absolute_path(library: AppDocuments, path: str) -> None:
    with pytest.raises(DocumentNotFoundError):
        library.add_folder(path)


def test_removing_an_upload_deletes_its_file_but_a_folder_file_stays(library: AppDocuments, tmp_path: Path) -> None:
    upload = library.add_upload("a.txt", b"Some text.")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "b.txt").write_text("Other text.")
    (from_folder,) = library.add_folder(str(folder)).added

    library.remove(upload.id)
    library.remove(from_folder.id)

    assert not Path(upload.path).exists() and (folder / "b.txt").exists()
    assert library.records() == []


def test_a_folder_file_that_disappeared_says_so(library: AppDocuments, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "b.txt").write_text("Other text.")
    (record,) = library.add_folder(str(folder)).added
    (folder / "b.txt").unlink()
    fresh = AppDocuments(library.store, tmp_path / "library", max_bytes=100_000)  # nothing loaded yet

    with pytest.raises(DocumentNotFoundError, match="no longer at"):
        fresh.documents([record.id])


def _until(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_folder_added_through_the_app_is_kept_in_sync(
    library: AppDocuments, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Edited, added, renamed and deleted files are reflected within 10 s, unchanged ones are not read again; what
    changed while nothing watched is caught up at the next start; removing a folder's document by hand stops the
    sync, so that it does not come back."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nThe depot is in Lyon.")
    (folder / "b.md").write_text("# B\n\nThe audit was by Grant Thornton.")
    library.add_folder(str(folder))
    library.watch()
    try:
        assert library.wait_synced(30)

        def texts() -> dict[str, str]:
            return {r.name: library.load(r).text for r in library.records()}

        def ranked_first(question: str) -> str | None:
            found = library.search(question)
            return found.ranking.ranked[0].chunk.document if found.ranking and found.ranking.ranked else None

        loads: list[str] = []
        read = protocols_library.load_document
        monkeypatch.setattr(
            protocols_library, "load_document", lambda path, **kw: (loads.append(path.name), read(path, **kw))[1]
        )
        (folder / "a.md").write_text("# A\n\nThe depot moved to Marseille.")
        assert _until(lambda: "Marseille" in texts().get("a.md", ""))
        assert ranked_first("Where is the depot?") == "a.md" and "Lyon" not in "".join(texts().values())
        (folder / "c.md").write_text("# C\n\nHeadcount rose to 812.")
        assert _until(lambda: "c.md" in texts()) and ranked_first("What was the headcount?") == "c.md"
        (folder / "c.md").rename(folder / "d.md")
        assert _until(lambda: "d.md" in texts() and "c.md" not in texts())
        (folder / "b.md").unlink()
        assert _until(lambda: "b.md" not in texts())
        assert "b.md" not in loads and set(loads) <= {"a.md", "c.md", "d.md"}  # unchanged files cost a hash

        library.unwatch()
        (folder / "e.md").write_text("# E\n\nWritten while nothing watched.")
        library.watch()
        assert library.wait_synced(30) and "e.md" in texts()

        (record,) = [r for r in library.records() if r.name == "e.md"]
        library.remove(record.id)
        assert library.store.folders() == []
        (folder / "f.md").write_text("# F\n\nNot followed any more.")
        time.sleep(2)
        assert "e.md" not in texts() and "f.md" not in texts()
    finally:
        library.unwatch()


def test_a_question_over_a_folder_reads_only_the_documents_it_names(make_local_app: AppFactory, tmp_path: Path) -> None:
    """Many documents, one named by the question: the search routes there, and the local model reads its chunks
    only (the scripted model quotes the revenue fact where it sees it)."""

    def filing(company: str, year: int, fact: str = "") -> str:
        cover = f"FORM 10-K\nFor the fiscal year ended December 31, {year}\n{company}\n(Exact name of registrant)\n\n"
        return cover + FILLER * 30 + fact + " " + FILLER * 5

    folder = tmp_path / "filings"
    folder.mkdir()
    for i, company in enumerate(["BOREALIS MINING CORP", "CASCADE SHIPPING INC", "DELTA FOODS LTD"]):
        (folder / f"f{i}.txt").write_text(filing(company, 2022))
    (folder / "quill.txt").write_text(filing("QUILL INSTRUMENTS PLC", 2023, FACT))
    with TestClient(make_local_app(), base_url="http://127.0.0.1:8765") as client:
        added = client.post("/api/folders", json={"path": str(folder)}).json()["added"]
        assert len(added) == 4 and client.get("/api/library/progress").json() == {"adding": None}
        conversation = client.post("/api/conversations").json()["id"]
        with client.stream(
            "POST", f"/api/conversations/{conversation}/messages", json={"question": "What was Quill's revenue?"}
        ) as response:
            events = [line for line in response.iter_lines() if line.startswith("data: ")]
    answer = json.loads(events[-1][6:])["message"]
    result = answer["meta"]["result"]
    assert "$4.2 billion" in answer["content"]
    assert result["reading"]["library"]["documents"][0] == "quill.txt"
    assert {j["document"] for j in result["jobs"]} == {"quill.txt"}


def test_a_file_swapped_for_a_link_out_after_it_was_added_is_never_read(library: AppDocuments, tmp_path: Path) -> None:
    """Every later read of a document's file is held to the same rule: a folder's file only from its folder, an
    upload only from the uploads folder; a remembered folder that has become a link is not read at all."""
    folder, outside = tmp_path / "docs", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "a.md").write_text("# A\n\nThe depot is in Lyon.")
    (outside / "a.md").write_text("# Secret\n\nThe vault code is 4471.")
    library.add_folder(str(folder))
    upload = library.add_upload("u.txt", b"Uploaded words.")
    for record in library.records():
        path = Path(record.path)
        path.unlink()
        os.symlink(outside / "a.md", path)
    library._loaded.clear()  # read from the files again, as after a restart
    for record in library.records():
        with pytest.raises(OutsideFolderError, match="leads outside the folders that may be read"):
            library.load(record)
    assert upload.id in {r.id for r in library.records()}
    kept = folder.rename(tmp_path / "docs-was")
    os.symlink(outside, folder)  # the remembered folder itself now leads elsewhere
    assert library._real_folders() == []
    library.watch()
    assert library._watch is None  # nothing to follow: the remembered folder is not read
    library.unwatch()
    assert kept.is_dir()


EARLIER_DOCUMENTS = """CREATE TABLE documents (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    source TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    chars INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    added_at REAL NOT NULL
)"""
"""The store's table of documents before the app's documents were the library's."""


def test_an_app_folder_of_the_earlier_layout_is_carried_into_the_library(tmp_path: Path) -> None:
    """The earlier layout, as the app wrote it: a table of documents in the store (ids, names, files), an upload
    under a generated name, a folder's file read in place, and the app's own index ``index.sqlite`` keyed by the
    store's ids (the upload in it; the folder's file not yet, as in a library from before the index). Opened
    today, both are the library's documents, found by a question, once: the table and the old index are gone."""
    root, folder = tmp_path / "library", tmp_path / "docs"
    (root / "uploads").mkdir(parents=True)
    folder.mkdir()
    upload = root / "uploads" / "5f0c2a9e8d7b4c1a.txt"
    upload.write_bytes(b"The warehouse in Lyon holds 4,200 pallets.")
    (folder / "b.md").write_text("# B\n\nThe audit was by Grant Thornton.")
    db = tmp_path / "minions.sqlite3"
    store = Store(db)
    store.add_folder(str(folder.resolve()))
    rows = [
        ("a1b2c3d4e5f6", "stock notes.txt", str(upload.resolve()), "upload", upload),
        ("0f9e8d7c6b5a", "b.md", str((folder / "b.md").resolve()), "folder", folder / "b.md"),
    ]
    with sqlite3.connect(db) as conn:
        conn.execute(EARLIER_DOCUMENTS)
        for n, (doc_id, name, path, source, file) in enumerate(rows):
            data = file.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            conn.execute("INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (doc_id, name, path, source, len(data), 0, len(data), digest, 1000.0 + n))  # fmt: skip
    with Library(root / EARLIER_INDEX_FILE) as earlier:  # the app's own index, keyed by the store's ids
        data = upload.read_bytes()
        text = Document("stock notes.txt", data.decode())
        earlier.put(text, key="a1b2c3d4e5f6", sha256=hashlib.sha256(data).hexdigest(), size=len(data))

    library = AppDocuments(Store(db), root, max_bytes=100_000)

    assert [(r.name, r.source) for r in library.records()] == [("stock notes.txt", "upload"), ("b.md", "folder")]
    assert [r.name for r in library.carried] == ["stock notes.txt", "b.md"]
    assert {d.key for d in library.library.documents} == {r[2] for r in rows}  # one key scheme: the files' paths
    found = library.search("How many pallets does the warehouse hold?")
    assert found.ranking is not None and found.ranking.ranked[0].chunk.document == "stock notes.txt"
    assert "Grant Thornton" in library.documents([library.resolve_names(["b.md"])[0]])[0].text
    assert not (root / EARLIER_INDEX_FILE).exists() and library.store.earlier_documents() == []
    assert library.store.folders() == [str(folder.resolve())]  # still kept in sync
    again = AppDocuments(Store(db), root, max_bytes=100_000)
    assert again.carried == [] and [r.id for r in again.records()] == [r.id for r in library.records()]
