from __future__ import annotations

import io
import json
import logging
import re
import zipfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pypdf
import pytest

from minions.documents import SUPPORTED_SUFFIXES, Document, Page, Section, load_document, load_documents, pdf
from minions.errors import DocumentNotFoundError, EmptyDocumentError, UnreadableDocumentError

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
FILING = DATA / "financebench" / "pdfs" / "3M_2018_10K.pdf"
SAMPLES = DATA / "minions_examples"


def needs(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared benchmark data not found at {path}")
    return path


def make_pdf(pages: list[str]) -> bytes:
    """A small valid PDF whose page i shows the lines of ``pages[i]`` in Helvetica ("" makes a blank page)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(pages))), len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        lines = [ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for ln in text.splitlines()]
        content = b"\n".join(
            b"BT /F1 12 Tf 72 %d Td (%s) Tj ET" % (720 - 16 * k, ln.encode("latin-1")) for k, ln in enumerate(lines)
        )
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


def encrypt(pdf: bytes, user_password: str) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


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


# --- Document -------------------------------------------------------------------------------------------


def test_supported_suffixes() -> None:
    assert SUPPORTED_SUFFIXES == (".txt", ".md", ".markdown", ".pdf", ".html", ".htm", ".docx")


def test_from_text_detects_markdown_sections_and_skips_code() -> None:
    text = "Intro line.\n\n# Methods\nWe did things.\n```python\n# not a heading\n```\n## Results ##\nIt worked.\n"
    doc = Document.from_text(text, name="notes.md")
    assert [s.title for s in doc.sections] == ["Methods", "Results"]
    methods, results = doc.sections
    assert text[methods.start :].startswith("# Methods")
    assert methods.end == results.start
    assert results.end == len(text)
    assert doc.pages == () and doc.path is None


def test_from_text_rejects_blank_text() -> None:
    with pytest.raises(EmptyDocumentError):
        Document.from_text(" \n\t ")


def test_filing_headings_skip_the_table_of_contents_and_complete_split_titles() -> None:
    toc = "".join(f"ITEM {n}\n\nSome Title {n}\n\n{n * 3}\n\n" for n in ("1", "1A", "2", "7"))
    body = (
        "Item 1.\nBusines\n\ns.\n\n" + "We make things. " * 20 + "\n\n"
        "Item 1A.\nRisk Factors\n\n" + "There are risks. " * 20 + "\n\n"
        "Item 2.\nProperties.\n\n" + "We own buildings. " * 20 + "\n\n"
        "MANAGEMENT DISCUSSION AND ANALYSIS\n\n" + "Sales grew. " * 20 + "\n\n"
        "Item 7.\nManagement’s\n\n Discussion and Analysis.\n\n" + "More text here. " * 20
    )
    doc = Document.from_text("ANNUAL REPORT\n\n" + toc + body, name="10k.txt")
    titles = [s.title for s in doc.sections]
    assert titles == [
        "ANNUAL REPORT",
        "Item 1. Business.",
        "Item 1A. Risk Factors",
        "Item 2. Properties.",
        "MANAGEMENT DISCUSSION AND ANALYSIS",
        "Item 7. Management’s Discussion and Analysis.",
    ]
    for s in doc.sections[1:]:
        assert doc.text[s.start : s.start + 4] in ("Item", "MANA")


def test_numbered_and_bold_headings_in_plain_text() -> None:
    text = "1 Introduction\nWe study.\n\n2.1 Related Work\nOthers did.\n\n**Diagnosis:**\nFlu.\n\n3. Buy milk today.\n"
    doc = Document.from_text(text, name="paper.txt")
    assert [s.title for s in doc.sections] == ["1 Introduction", "2.1 Related Work", "Diagnosis"]


def test_page_lookup() -> None:
    text = "aaa\n\nbbbb\n\n\n\ncc"
    pages = (Page(1, 0, 3), Page(2, 5, 9), Page(3, 11, 11), Page(4, 13, 15))
    doc = Document(name="x.pdf", text=text, pages=pages)
    assert [doc.page_of(i) for i in (0, 2, 3, 5, 8, 11, 12, 13, 14)] == [1, 1, 1, 2, 2, 3, 3, 4, 4]
    assert doc.page_of(-1) is None and doc.page_of(99) is None
    assert doc.pages_between(0, 3) == (1,)
    assert doc.pages_between(1, 7) == (1, 2)
    assert doc.pages_between(6, 15) == (2, 3, 4)
    assert Document.from_text("no pages").page_of(0) is None
    assert Document.from_text("no pages").pages_between(0, 3) == ()


def test_describe_never_shows_the_text() -> None:
    secret = "the launch code is 0000"
    sections = tuple(Section(f"Part {i}", i, i + 1) for i in range(80))
    doc = Document(name="memo.txt", text=secret * 100, sections=sections)
    info = doc.describe()
    assert info["name"] == "memo.txt"
    assert info["characters"] == len(secret) * 100
    assert info["approx_tokens"] == len(secret) * 100 // 4
    assert info["pages"] == 0
    assert len(info["sections"]) == 50 and info["sections"][0] == "Part 0"
    assert info["sections_total"] == 80
    assert "launch code" not in json.dumps(info)
    assert "launch code" not in repr(doc)


# --- text, Markdown, HTML, docx -------------------------------------------------------------------------


def test_load_real_sample_text() -> None:
    path = needs(SAMPLES / "finance" / "sample.txt")
    doc = load_document(path)
    assert doc.name == "sample.txt"
    assert doc.path == str(path)
    assert doc.text == path.read_text(encoding="utf-8").replace("\r\n", "\n")
    assert doc.pages == ()
    assert "Gross property and equipment" in doc.text
    assert any(s.title.startswith("Item 15.") for s in doc.sections)


def test_load_documents_in_order() -> None:
    paths = [needs(SAMPLES / name / "sample.txt") for name in ("health", "long_documents")]
    docs = load_documents(paths)
    assert [d.path for d in docs] == [str(p) for p in paths]
    assert "Omnipaque" in docs[0].text
    assert "5.1 Protocol description" in [s.title for s in docs[1].sections]


def test_text_encodings(tmp_path: Path) -> None:
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café crème\r\nline two".encode("latin-1"))
    assert load_document(latin).text == "café crème\nline two"
    assert load_document(latin).metadata["encoding"] == "latin-1"
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffnaïve".encode())
    assert load_document(bom).text == "naïve"
    utf16 = tmp_path / "wide.txt"
    utf16.write_bytes("wide text".encode("utf-16"))
    assert load_document(utf16).text == "wide text"


def test_markdown_file_uses_markdown_rules(tmp_path: Path) -> None:
    path = tmp_path / "notes.markdown"
    path.write_text("# Title\nTEXT IN CAPS HERE\n\n## Results\nfine\n", encoding="utf-8")
    doc = load_document(path)
    assert [s.title for s in doc.sections] == ["Title", "Results"]
    assert doc.metadata["format"] == "markdown"


def test_html(tmp_path: Path) -> None:
    path = tmp_path / "page.HTM"
    path.write_text(
        "<html><head><title>My  Page</title><style>p {color: red}</style></head><body>"
        "<h1>Overview</h1><p>Fish &amp; chips,\n   served   hot.</p><script>var x = 1;</script>"
        "<h2>Prices</h2><table><tr><td>Cod</td><td>5</td></tr><tr><td>Hake</td><td>4</td></tr></table>"
        "<p>Open <b>daily</b>.<br>Cash only.</p></body></html>",
        encoding="utf-8",
    )
    doc = load_document(path)
    assert doc.text == "Overview\n\nFish & chips, served hot.\n\nPrices\n\nCod | 5\nHake | 4\n\nOpen daily.\nCash only."
    assert [(s.title, doc.text[s.start : s.start + len(s.title)]) for s in doc.sections] == [
        ("Overview", "Overview"),
        ("Prices", "Prices"),
    ]
    assert doc.sections[-1].end == len(doc.text)
    assert doc.metadata["title"] == "My Page"


def make_docx(path: Path, body: str) -> None:
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", f"<w:document {ns}><w:body>{body}</w:body></w:document>")


def test_docx(tmp_path: Path) -> None:
    path = tmp_path / "report.docx"
    make_docx(
        path,
        '<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Summary</w:t></w:r></w:p>'
        '<w:p><w:r><w:t xml:space="preserve">Revenue was </w:t></w:r><w:r><w:t>up.</w:t></w:r></w:p>'
        "<w:p/>"
        "<w:tbl><w:tr><w:tc><w:p><w:r><w:t>Q1</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>10</w:t></w:r></w:p></w:tc>"
        "</w:tr></w:tbl>"
        '<w:p><w:pPr><w:pStyle w:val="Heading2"/></w:pPr><w:r><w:t>Outlook</w:t></w:r></w:p>'
        "<w:p><w:r><w:t>Good</w:t><w:tab/><w:t>year</w:t></w:r></w:p>",
    )
    doc = load_document(path)
    assert doc.text == "Summary\n\nRevenue was up.\n\nQ1 | 10\n\nOutlook\n\nGood\tyear"
    assert [s.title for s in doc.sections] == ["Summary", "Outlook"]
    assert doc.text[doc.sections[1].start :].startswith("Outlook")


@pytest.mark.parametrize("content", [b"not a zip at all", None])
def test_bad_docx(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "bad.docx"
    if content is None:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("hello.txt", "no word/document.xml in here")
    else:
        path.write_bytes(content)
    with pytest.raises(UnreadableDocumentError) as info:
        load_document(path)
    assert info.value.path == str(path)


# --- errors ---------------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DocumentNotFoundError) as info:
        load_document(tmp_path / "nope.pdf")
    assert info.value.path == str(tmp_path / "nope.pdf")
    assert "\n" not in str(info.value)


def test_directory_and_unsupported_suffix(tmp_path: Path) -> None:
    with pytest.raises(UnreadableDocumentError, match="directory"):
        load_document(tmp_path)
    odd = tmp_path / "data.xlsx"
    odd.write_bytes(b"whatever")
    with pytest.raises(UnreadableDocumentError, match=r"\.xlsx") as info:
        load_document(odd)
    assert ".pdf" in str(info.value)


@pytest.mark.parametrize("name", ["empty.txt", "empty.pdf", "empty.md", "empty.html", "empty.docx"])
def test_empty_files(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"")
    with pytest.raises(EmptyDocumentError):
        load_document(path)


def test_whitespace_only_text_and_textless_html(tmp_path: Path) -> None:
    (tmp_path / "blank.txt").write_text("  \n\n \t")
    with pytest.raises(EmptyDocumentError):
        load_document(tmp_path / "blank.txt")
    (tmp_path / "blank.html").write_text("<html><script>x()</script></html>")
    with pytest.raises(EmptyDocumentError):
        load_document(tmp_path / "blank.html")


def test_corrupt_pdf(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"\x00garbage that is not a pdf\x01" * 50)
    with pytest.raises(UnreadableDocumentError) as info:
        load_document(path)
    assert "\n" not in str(info.value)
    truncated = tmp_path / "truncated.pdf"
    truncated.write_bytes(make_pdf(["hello"])[:60])
    with pytest.raises(UnreadableDocumentError):
        load_document(truncated)


def test_encrypted_pdf(tmp_path: Path, cache: Path) -> None:
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypt(make_pdf(["secret numbers"]), user_password="pw"))
    with pytest.raises(UnreadableDocumentError, match="encrypted: decrypt it first") as info:
        load_document(locked)
    assert "\n" not in str(info.value)
    # Only an owner password (restrictions, not secrecy): opens with the empty password.
    restricted = tmp_path / "restricted.pdf"
    restricted.write_bytes(encrypt(make_pdf(["open numbers"]), user_password=""))
    assert "open numbers" in load_document(restricted).text


def test_scanned_pdf_without_text(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf(["", ""]))
    with pytest.raises(EmptyDocumentError, match="OCR"):
        load_document(path)


# --- PDF ------------------------------------------------------------------------------------------------


def test_pdf_pages_offsets_and_cache(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "three.pdf"
    path.write_bytes(make_pdf(["First page\nalpha", "", "Third page\ngamma"]))
    doc = load_document(path)
    assert doc.name == "three.pdf" and doc.metadata["format"] == "pdf"
    assert [p.number for p in doc.pages] == [1, 2, 3]
    assert doc.text == "\n\n".join(doc.text[p.start : p.end] for p in doc.pages)
    assert doc.pages[1].start == doc.pages[1].end  # the blank page is kept
    assert doc.page_of(doc.text.index("alpha")) == 1
    assert doc.page_of(doc.text.index("gamma")) == 3
    assert doc.pages_between(doc.text.index("alpha"), doc.text.index("gamma")) == (1, 2, 3)

    entries = list(cache.glob("*.json"))
    assert [e.stem for e in entries] == [doc.metadata["sha256"]]
    assert not list(cache.glob("*.tmp"))

    def boom(*args: object, **kwargs: object) -> str:
        raise AssertionError("extracted again despite the cache")

    monkeypatch.setattr(pypdf.PageObject, "extract_text", boom)
    again = load_document(path)
    assert again.text == doc.text and again.pages == doc.pages


def test_pdf_without_cache_writes_nothing(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "one.pdf"
    path.write_bytes(make_pdf(["just one page"]))
    assert load_document(path, cache=False).text == "just one page"
    assert not cache.exists()


def test_corrupt_cache_entry_is_ignored(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "one.pdf"
    path.write_bytes(make_pdf(["cached page"]))
    sha = load_document(path).metadata["sha256"]
    (cache / f"{sha}.json").write_text("{not json")
    assert load_document(path).text == "cached page"


def test_pdf_page_that_fails_is_kept_empty(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "flaky.pdf"
    path.write_bytes(make_pdf(["page one", "page two", "page three"]))
    real = pypdf.PageObject.extract_text

    def flaky(self: pypdf.PageObject, *args: object, **kwargs: object) -> str:
        text = real(self)
        if "two" in text:
            raise ValueError("bad content stream")
        return text

    monkeypatch.setattr(pypdf.PageObject, "extract_text", flaky)
    with caplog.at_level(logging.WARNING, logger="minions.documents"):
        doc = load_document(path, cache=False)
    assert len(doc.pages) == 3
    assert doc.text[doc.pages[1].start : doc.pages[1].end] == ""
    assert doc.page_of(doc.text.index("three")) == 3
    assert doc.metadata["failed_pages"] == [2]
    assert "page 2" in caplog.text


def test_parallel_extraction_matches_sequential(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools: list[int] = []

    class RecordingPool(ProcessPoolExecutor):
        def __init__(self, max_workers: int, **kwargs: Any) -> None:
            pools.append(max_workers)
            super().__init__(max_workers, **kwargs)

    monkeypatch.setattr(pdf, "ProcessPoolExecutor", RecordingPool)
    path = tmp_path / "long.pdf"
    path.write_bytes(make_pdf([f"Page number {i}\nline {i}" for i in range(1, 31)]))
    sequential = load_document(path, cache=False, workers=1)
    assert pools == []
    parallel = load_document(path, cache=False, workers=3)
    assert pools == ([3] if pdf._can_fork() else [])
    assert parallel.text == sequential.text and parallel.pages == sequential.pages
    assert sequential.page_of(sequential.text.index("Page number 17")) == 17


def test_real_filing_pages_and_sections(filing: Document) -> None:
    assert filing.name == "3M_2018_10K.pdf"
    assert len(filing.pages) == 160
    # FinanceBench's evidence for 3M's FY2018 capex is the cash flow statement on page 60 (59 zero-based).
    # The line appears in MD&A (pages 46, 49) and in the statement itself.
    phrase = "Purchases of property, plant and equipment (PP&E)"
    hits = [m.start() for m in re.finditer(re.escape(phrase), filing.text)]
    assert [filing.page_of(h) for h in hits] == [46, 49, 60]
    page60 = filing.text[filing.pages[59].start : filing.pages[59].end]
    assert page60.startswith("Table of Contents") and "Consolidated Statement of Cash Flow" in page60
    assert filing.text[hits[-1] :].split()[len(phrase.split())] == "(1,577)"
    # ... and for its net PP&E the balance sheet on page 58.
    assert filing.page_of(filing.text.index("Total current assets")) == 58
    titles = [s.title for s in filing.sections]
    assert "Item 1A. Risk Factors" in titles
    assert titles.count("Item 1A. Risk Factors") == 1  # its table-of-contents entry is not a section
    item7 = next(s for s in filing.sections if s.title.startswith("Item 7. Management"))
    assert filing.page_of(item7.start) == 15
    info = filing.describe()
    assert info["pages"] == 160 and info["approx_tokens"] == len(filing.text) // 4
    assert len(info["sections"]) <= 50
