from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest

from minions.chunking import CHARS_PER_PAGE, Chunk, chunk_document, chunk_documents
from minions.documents import Document, Page, load_document
from minions.tokens import count_tokens

from ..conftest import BENCHMARK_DATA as DATA

SAMPLES = DATA / "minions_examples"
SMALL_FILING = DATA / "financebench" / "pdfs" / "AMCOR_2022_8K_dated-2022-07-01.pdf"


def needs(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared benchmark data not found at {path}")
    return path


@pytest.fixture(scope="module", params=["finance", "health", "long_documents"])
def sample(request: pytest.FixtureRequest) -> Document:
    return load_document(needs(SAMPLES / request.param / "sample.txt"))


def paged_document(texts: list[str], name: str = "book.pdf") -> Document:
    pages, offset = [], 0
    for number, t in enumerate(texts, start=1):
        if number > 1:
            offset += 2
        pages.append(Page(number, offset, offset + len(t)))
        offset += len(t)
    return Document(name=name, text="\n\n".join(texts), pages=tuple(pages))


def check_invariants(doc: Document, chunks: list[Chunk], overlap: bool = False) -> None:
    """Exact stripped non-empty slices, in order, indexed from 0, and (without overlap) no text lost."""
    assert chunks
    for i, c in enumerate(chunks):
        assert c.document == doc.name
        assert c.index == i
        assert c.text and c.text == c.text.strip()
        assert doc.text[c.start : c.end] == c.text
        assert c.pages == doc.pages_between(c.start, c.end)
    for a, b in pairwise(chunks):
        assert a.start < b.start and a.end <= b.end
        if not overlap:
            assert a.end <= b.start
            assert not doc.text[a.end : b.start].strip()
    assert not doc.text[: chunks[0].start].strip()
    assert not doc.text[chunks[-1].end :].strip()


# --- chars ----------------------------------------------------------------------------------------------


def test_chars_invariants_and_sizes(sample: Document) -> None:
    chunks = chunk_document(sample, "chars", size=2000)
    check_invariants(sample, chunks)
    assert all(len(c.text) <= 2000 for c in chunks)
    # breaks are looked for in the last fifth of a window only, so all but the last chunk are long
    assert all(len(c.text) >= 1500 for c in chunks[:-1])


def test_chars_overlap_repeats_text(sample: Document) -> None:
    chunks = chunk_document(sample, "chars", size=2000, overlap=300)
    check_invariants(sample, chunks, overlap=True)
    for a, b in pairwise(chunks):
        shared = a.end - b.start
        assert 0 < shared <= 300


def test_chars_prefers_paragraph_then_sentence_then_space() -> None:
    para = "word " * 180  # 900 chars: its end lies in the last fifth of a 1000-char window
    doc = Document.from_text((para.strip() + "\n\n") * 4)
    chunks = chunk_document(doc, "chars", size=1000)
    assert all(c.text == para.strip() for c in chunks)

    sentences = Document.from_text("This is one sentence, with words in it. " * 60)
    for c in chunk_document(sentences, "chars", size=500)[:-1]:
        assert c.text.endswith(".")

    words = Document.from_text("abcdefghi " * 300)
    for c in chunk_document(words, "chars", size=95):
        assert c.text.replace(" ", "").replace("abcdefghi", "") == ""

    solid = Document.from_text("x" * 2500)
    assert [len(c.text) for c in chunk_document(solid, "chars", size=1000)] == [1000, 1000, 500]


def test_small_document_is_one_chunk() -> None:
    doc = Document.from_text("\n\n  Short note.  \n", name="note.txt")
    (chunk,) = chunk_document(doc)
    assert chunk.text == "Short note."
    assert (chunk.start, chunk.end) == (4, 15)
    assert chunk.label == "note.txt #1"
    assert chunk.provenance() == {
        "document": "note.txt",
        "chunk": 0,
        "start": 4,
        "end": 15,
        "pages": [],
        "section": None,
    }


# --- tokens ---------------------------------------------------------------------------------------------


def counting(counter: Callable[[str], int]) -> tuple[Callable[[str], int], list[int]]:
    seen: list[int] = []

    def count(text: str) -> int:
        seen.append(len(text))
        return counter(text)

    return count, seen


def test_tokens_fit_the_budget_and_the_counter_is_called_sparingly(sample: Document) -> None:
    count, seen = counting(count_tokens)
    chunks = chunk_document(sample, "tokens", size=500, count_tokens=count)
    check_invariants(sample, chunks)
    sizes = [count_tokens(c.text) for c in chunks]
    assert max(sizes) <= 500
    assert sum(sizes[:-1]) / max(len(sizes) - 1, 1) >= 350
    # linear, not quadratic: the counter sees about twice the text, in a few calls per chunk
    assert sum(seen) <= 4 * len(sample.text)
    assert len(seen) <= 5 * len(chunks) + 2


def test_tokens_with_overlap_and_a_custom_counter() -> None:
    doc = Document.from_text(" ".join(f"w{i}" for i in range(3000)))

    def words(text: str) -> int:
        return len(text.split())

    chunks = chunk_document(doc, "tokens", size=100, overlap=10, count_tokens=words)
    check_invariants(doc, chunks, overlap=True)
    assert all(words(c.text) <= 100 for c in chunks)
    assert all(words(c.text) >= 80 for c in chunks[:-1])
    assert all(words(doc.text[b.start : a.end]) <= 12 for a, b in pairwise(chunks))


# --- pages ----------------------------------------------------------------------------------------------


def test_pages_groups_and_overlap() -> None:
    doc = paged_document([f"page {i} text" for i in range(1, 6)])
    chunks = chunk_document(doc, "pages", size=2)
    check_invariants(doc, chunks)
    assert [c.pages for c in chunks] == [(1, 2), (3, 4), (5,)]
    assert [c.label for c in chunks] == ["book.pdf p.1-2", "book.pdf p.3-4", "book.pdf p.5"]
    assert chunks[1].text == "page 3 text\n\npage 4 text"
    overlapping = chunk_document(doc, "pages", size=2, overlap=1)
    assert [c.pages for c in overlapping] == [(1, 2), (2, 3), (3, 4), (4, 5)]


def test_pages_skip_blank_pages() -> None:
    doc = paged_document(["one", "", "three"])
    assert [c.pages for c in chunk_document(doc, "pages", size=1)] == [(1,), (3,)]


def test_pages_of_a_real_filing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path))
    doc = load_document(needs(SMALL_FILING))
    chunks = chunk_document(doc, "pages", size=1)
    check_invariants(doc, chunks)
    assert len(chunks) == len(doc.pages) == 9
    for c in chunks:
        (number,) = c.pages
        page = doc.pages[number - 1]
        assert c.text == doc.text[page.start : page.end].strip()
        assert c.provenance()["pages"] == [number]
    by_chars = chunk_document(doc, "chars", size=1500)
    check_invariants(doc, by_chars)
    phrase = "Amcor"
    for c in by_chars:
        if phrase in c.text:
            assert doc.page_of(c.start + c.text.index(phrase)) in c.pages


def test_pages_without_pages_falls_back_to_chars(caplog: pytest.LogCaptureFixture) -> None:
    doc = Document.from_text("Some words here. " * 1000, name="plain.txt")
    with caplog.at_level(logging.INFO, logger="minions.chunking"):
        chunks = chunk_document(doc, "pages", size=2)
    assert "no pages" in caplog.text
    check_invariants(doc, chunks)
    assert all(len(c.text) <= 2 * CHARS_PER_PAGE for c in chunks)
    assert len(chunks) == 3


# --- sections -------------------------------------------------------------------------------------------


def test_sections_one_chunk_each_with_preamble() -> None:
    text = "Preamble text.\n\n# Intro\nHello there.\n\n# Body\n" + "Long sentence here. " * 30 + "\n# End\nBye.\n"
    doc = Document.from_text(text, name="notes.md")
    chunks = chunk_document(doc, "sections", size=250)
    check_invariants(doc, chunks)
    assert [c.section for c in chunks[:2]] == [None, "Intro"]
    assert chunks[0].text == "Preamble text."
    assert chunks[1].text == "# Intro\nHello there."
    assert chunks[1].label == "notes.md §Intro"
    body = [c for c in chunks if c.section == "Body"]
    assert len(body) == 3 and all(len(c.text) <= 250 for c in body)
    assert chunks[-1].section == "End" and chunks[-1].text == "# End\nBye."


def test_sections_of_a_real_paper() -> None:
    doc = load_document(needs(SAMPLES / "long_documents" / "sample.txt"))
    chunks = chunk_document(doc, "sections", size=4000)
    check_invariants(doc, chunks)
    titles = {c.section for c in chunks}
    assert {"1 Introduction", "5.1 Protocol description", "6 Results"} <= titles
    for c in chunks:
        if c.section is not None:
            section = next(s for s in doc.sections if s.start <= c.start < s.end)
            assert c.section == section.title and c.end <= section.end


def test_sections_without_sections_falls_back_to_chars() -> None:
    doc = Document.from_text("plain words " * 500)
    assert doc.sections == ()
    chunks = chunk_document(doc, "sections", size=1000)
    check_invariants(doc, chunks)
    assert chunks == chunk_document(doc, "chars", size=1000)


def test_chunks_know_their_section_in_chars_mode() -> None:
    doc = Document.from_text("# A\n" + "alpha " * 100 + "\n# B\n" + "beta " * 100, name="x.md")
    chunks = chunk_document(doc, "chars", size=300)
    assert chunks[0].section == "A" and chunks[-1].section == "B"


# --- several documents, labels, arguments ---------------------------------------------------------------


def test_chunk_documents_restarts_indexes() -> None:
    docs = [Document.from_text("one " * 300, name="a.txt"), Document.from_text("two " * 300, name="b.txt")]
    chunks = chunk_documents(docs, "chars", size=500)
    assert [(c.document, c.index) for c in chunks] == [(name, i) for name in ("a.txt", "b.txt") for i in range(3)]


def test_label_truncates_long_section_titles() -> None:
    chunk = Chunk("r.md", 0, "x", 0, 1, section="A" * 100)
    assert chunk.label == "r.md §" + "A" * 39 + "…"


@pytest.mark.parametrize(
    ("by", "size", "overlap", "message"),
    [
        ("words", 100, 0, "Unknown chunking"),
        ("chars", 0, 0, "positive"),
        ("chars", -5, 0, "positive"),
        ("chars", 100, 100, "overlap"),
        ("pages", 2, 3, "overlap"),
        ("tokens", 100, -1, "overlap"),
    ],
)
def test_invalid_arguments(by: str, size: int, overlap: int, message: str) -> None:
    doc = Document.from_text("text")
    with pytest.raises(ValueError, match=message):
        chunk_document(doc, by, size, overlap)  # type: ignore[arg-type]


def test_chars_never_cross_a_page_break() -> None:
    pages = [f"Sentence on page {n}. " * 30 for n in (1, 2, 3)]
    doc = paged_document(pages)
    chunks = chunk_document(doc, "chars", 400)
    check_invariants(doc, chunks)
    assert all(len(c.pages) == 1 for c in chunks)
    assert [c.pages[0] for c in chunks] == sorted(c.pages[0] for c in chunks) and {c.pages[0] for c in chunks} == {
        1,
        2,
        3,
    }
    assert all(f"page {c.pages[0]}." in c.text for c in chunks)
