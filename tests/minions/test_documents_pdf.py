from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pypdfium2
import pytest

from minions.documents import Document, load_document, pdf, pdf_cache
from minions.errors import EmptyDocumentError, UnreadableDocumentError

from .doc_helpers import DATA, encrypt, make_pdf, needs

FINANCEBENCH = DATA / "financebench"
FILING = FINANCEBENCH / "pdfs" / "3M_2018_10K.pdf"
AES_FILING = FINANCEBENCH / "pdfs" / "ADOBE_2022_10K.pdf"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "pdf-text"


@pytest.fixture(scope="module")
def filing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Document]:
    path = needs(FILING)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIONS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield load_document(path)


# --- pages and text -------------------------------------------------------------------------------------


def test_pages_text_and_numbering(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "three.pdf"
    path.write_bytes(make_pdf(["First page\nalpha", "", "Third page\ngamma"]))
    doc = load_document(path)
    assert doc.name == "three.pdf" and doc.metadata["format"] == "pdf"
    assert [p.number for p in doc.pages] == [1, 2, 3]
    assert [doc.text[p.start : p.end] for p in doc.pages] == ["First page\nalpha", "", "Third page\ngamma"]
    assert doc.text == "First page\nalpha\n\n\n\nThird page\ngamma"
    assert doc.page_of(doc.text.index("alpha")) == 1
    assert doc.page_of(doc.text.index("gamma")) == 3
    assert doc.pages_between(doc.text.index("alpha"), doc.text.index("gamma")) == (1, 2, 3)
    assert doc.metadata["failed_pages"] == []


def test_line_end_hyphens_are_kept() -> None:
    raw = "Regulation S\ufffeT  \r\nlong\x02term\r\n\r\n\r\n\r\nend"
    assert pdf._clean_page(raw) == "Regulation S-T\nlong-term\n\nend"


def test_page_that_fails_is_kept_empty(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "flaky.pdf"
    path.write_bytes(make_pdf(["page one", "page two", "page three"]))
    real = pdf._page_text

    def flaky(document: pypdfium2.PdfDocument, index: int) -> str:
        if index == 1:
            raise pypdfium2.PdfiumError("Failed to load text page.")
        return real(document, index)

    monkeypatch.setattr(pdf, "_page_text", flaky)
    with caplog.at_level(logging.WARNING, logger="minions.documents"):
        doc = load_document(path, cache=False)
    assert len(doc.pages) == 3
    assert doc.text[doc.pages[1].start : doc.pages[1].end] == ""
    assert doc.page_of(doc.text.index("three")) == 3
    assert doc.metadata["failed_pages"] == [2]
    assert "page 2" in caplog.text


def test_threads_load_pdfs_at_the_same_time(tmp_path: Path, cache: Path) -> None:
    # PDFium is not thread-safe: without the module's lock this crashes the interpreter, or garbles text.
    paths = []
    for k in range(4):
        paths.append(tmp_path / f"doc{k}.pdf")
        paths[-1].write_bytes(make_pdf([f"Document {k} page {i}\nline {i}" for i in range(1, 31)]))
    results: dict[int, Document] = {}

    def load(k: int) -> None:
        results[k] = load_document(paths[k], cache=False)

    threads = [threading.Thread(target=load, args=(k,)) for k in range(len(paths))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, doc in results.items():
        assert doc.page_of(doc.text.index(f"Document {k} page 17")) == 17
    assert len(results) == len(paths)


# --- the cache ------------------------------------------------------------------------------------------


def test_cache_is_used(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "three.pdf"
    path.write_bytes(make_pdf(["First page\nalpha", "", "Third page\ngamma"]))
    doc = load_document(path)
    sha = doc.metadata["sha256"]
    assert [e.name for e in cache.iterdir()] == [f"{sha}.v{pdf_cache.FORMAT}.json"]

    def boom(*args: object) -> str:
        raise AssertionError("extracted again despite the cache")

    monkeypatch.setattr(pdf, "_page_text", boom)
    again = load_document(path)
    assert again.text == doc.text and again.pages == doc.pages


def test_without_cache_nothing_is_written(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "one.pdf"
    path.write_bytes(make_pdf(["just one page"]))
    assert load_document(path, cache=False).text == "just one page"
    assert not cache.exists()


def test_corrupt_cache_entry_is_ignored(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "one.pdf"
    path.write_bytes(make_pdf(["cached page"]))
    sha = load_document(path).metadata["sha256"]
    pdf_cache.cache_path(sha).write_text("{not json")
    assert load_document(path).text == "cached page"


def test_text_from_the_old_reader_is_not_used(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "one.pdf"
    path.write_bytes(make_pdf(["fresh text"]))
    sha = load_document(path, cache=False).metadata["sha256"]
    old = {"extractor": "pypdf 5.1.0 / 1", "pages": ["stale text"], "failed_pages": []}
    cache.mkdir(parents=True)
    (cache / f"{sha}.json").write_text(json.dumps(old))  # where the pypdf reader kept it
    pdf_cache.cache_path(sha).write_text(json.dumps(old))  # and under the new key, as if copied there
    assert load_document(path).text == "fresh text"


# --- what cannot be read --------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_encrypted_with_the_empty_password_opens(tmp_path: Path, cache: Path, algorithm: str) -> None:
    path = tmp_path / "restricted.pdf"
    path.write_bytes(encrypt(make_pdf(["open numbers", "page two"]), user_password="", algorithm=algorithm))
    doc = load_document(path)
    assert doc.text == "open numbers\n\npage two"


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-256"])
def test_needing_a_password_is_a_clear_error(tmp_path: Path, cache: Path, algorithm: str) -> None:
    path = tmp_path / "locked.pdf"
    path.write_bytes(encrypt(make_pdf(["secret numbers"]), user_password="pw", algorithm=algorithm))
    with pytest.raises(UnreadableDocumentError, match="encrypted with a password: decrypt it first") as info:
        load_document(path)
    assert "\n" not in str(info.value) and info.value.path == str(path)


def test_shared_aes256_filing_opens(cache: Path) -> None:
    doc = load_document(needs(AES_FILING), cache=False)
    assert len(doc.pages) > 50 and "Adobe" in doc.text and doc.metadata["failed_pages"] == []


@pytest.mark.parametrize(
    "content",
    [
        b"%PDF-1.4\n1 0 obj << /Type /Catalog",
        make_pdf(["hello", "world"])[:200],
        make_pdf(["hello", "world"])[:-120],
    ],
    ids=["garbage", "truncated-early", "truncated-late"],
)
def test_corrupt_or_truncated_is_a_clear_error(tmp_path: Path, cache: Path, content: bytes) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(content)
    with pytest.raises(UnreadableDocumentError, match=r"not a readable PDF .*: check the file is complete") as info:
        load_document(path)
    assert "\n" not in str(info.value) and info.value.path == str(path)


def test_scan_without_text_asks_for_ocr(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf(["", ""]))
    with pytest.raises(EmptyDocumentError, match="OCR"):
        load_document(path)


# --- a real filing --------------------------------------------------------------------------------------


def financebench_evidence(financebench_id: str) -> dict[str, Any]:
    rows = needs(FINANCEBENCH / "data" / "financebench_open_source.jsonl").read_text().splitlines()
    items = (json.loads(r) for r in rows)
    evidence: dict[str, Any] = next(i for i in items if i["financebench_id"] == financebench_id)["evidence"][0]
    return evidence


def test_real_filing_capex_is_on_the_page_financebench_gives(filing: Document) -> None:
    # FinanceBench's evidence_page_num is 0-based: its evidence_text_full_page is the text of PDF page
    # evidence_page_num + 1 (checked over all 165 evidence pages with text); here the cash flow statement.
    evidence = financebench_evidence("financebench_id_03029")  # 3M FY2018 capital expenditure
    assert evidence["doc_name"] == "3M_2018_10K" and evidence["evidence_page_num"] == 59
    phrase = "Purchases of property, plant and equipment (PP&E)"
    hits = [m.start() for m in re.finditer(re.escape(phrase), filing.text)]
    # The line appears in MD&A (pages 46 and 49) and in the statement itself.
    assert [filing.page_of(h) for h in hits] == [46, 49, 60]
    assert filing.page_of(hits[-1]) == evidence["evidence_page_num"] + 1
    assert filing.text[hits[-1] :].split()[len(phrase.split())] == "(1,577)"
    page60 = filing.text[filing.pages[59].start : filing.pages[59].end]
    assert page60.startswith("Table of Contents\n3M Company and Subsidiaries\nConsolidated Statement of Cash Flows")


def test_real_filing_pages_and_sections(filing: Document) -> None:
    assert filing.name == "3M_2018_10K.pdf"
    assert len(filing.pages) == 160 and filing.metadata["failed_pages"] == []
    # The balance sheet, FinanceBench's evidence for 3M's net PP&E (evidence_page_num 57), is page 58.
    assert filing.page_of(filing.text.index("Total current assets")) == 58
    # Table rows come out as one line each, in reading order.
    assert "Net cash provided by (used in) operating activities 6,439 6,240 6,662\n" in filing.text
    titles = [s.title for s in filing.sections]
    assert titles.count("Item 1A. Risk Factors") == 1  # its table-of-contents entry is not a section
    item7 = next(s for s in filing.sections if s.title.startswith("Item 7. Management"))
    assert filing.page_of(item7.start) == 15
    info = filing.describe()
    assert info["pages"] == 160 and info["approx_tokens"] == len(filing.text) // 4
    assert len(info["sections"]) <= 50
