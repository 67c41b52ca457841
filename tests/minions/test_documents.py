from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from minions.documents import SUPPORTED_SUFFIXES, Document, Page, Section, load_document, load_documents
from minions.errors import DocumentNotFoundError, EmptyDocumentError, UnreadableDocumentError

from .doc_helpers import DATA, needs

SAMPLES = DATA / "minions_examples"


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


def test_a_device_or_a_pipe_is_refused_before_it_is_read(tmp_path):
    fifo = tmp_path / "notes.txt"
    os.mkfifo(fifo)  # reading it would wait for a writer for ever
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(UnreadableDocumentError, match="is not a regular file: pass a document file"):
            load_document(path)


def test_errors_name_the_file_as_the_user_knows_it(tmp_path):
    stored = tmp_path / "3f2a9c.pdf"
    stored.write_bytes(b"%PDF-1.4\n" + b"\x00garbage" * 50)
    with pytest.raises(UnreadableDocumentError) as refused:
        load_document(stored, shown="annual-report.pdf", cache=False)
    assert str(refused.value).startswith("annual-report.pdf is not a readable PDF") and "3f2a9c" not in str(
        refused.value
    )
