"""Documents: load text, Markdown, PDF, HTML and .docx files into one ``Document`` with pages and sections.

A ``Document`` is the full text plus offsets into it: ``pages`` (PDFs; pages are joined with a blank line) and
``sections`` (detected headings). Chunkers and provenance work with character offsets only, so everything a
chunk says about where it came from (page numbers, section title) is computed from these offsets.

PDF text extraction (pypdf) is slow, about a tenth of a second a page, so a 300-page filing takes half a
minute on one core. ``load_document`` therefore extracts pages in parallel worker processes when it safely can
and keeps the extracted text in an on-disk cache keyed by the file's sha256 (``<cache_dir>/pdf-text``).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import multiprocessing
import os
import re
import sys
import tempfile
import threading
import zipfile
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree

from minions.errors import DocumentNotFoundError, EmptyDocumentError, UnreadableDocumentError
from minions.paths import cache_dir

__all__ = [
    "SUPPORTED_SUFFIXES",
    "Document",
    "Page",
    "Section",
    "load_document",
    "load_documents",
]

log = logging.getLogger(__name__)

SUPPORTED_SUFFIXES: tuple[str, ...] = (".txt", ".md", ".markdown", ".pdf", ".html", ".htm", ".docx")
_MARKDOWN_SUFFIXES = (".md", ".markdown")
_PAGE_SEPARATOR = "\n\n"
_MAX_DESCRIBED_SECTIONS = 50
_MAX_TITLE_CHARS = 120


@dataclass(frozen=True, slots=True)
class Page:
    number: int
    """1-based page number."""
    start: int
    """Offset of the page's first character within ``Document.text``."""
    end: int
    """Offset one past its last character (``start == end`` for a page without text)."""


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    start: int
    end: int


@dataclass(frozen=True)
class Document:
    """A loaded document: its full text, and pages and sections as offsets into that text."""

    name: str
    text: str = field(repr=False)
    path: str | None = None
    pages: tuple[Page, ...] = field(default=(), repr=False)
    sections: tuple[Section, ...] = field(default=(), repr=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_text(cls, text: str, name: str = "document") -> Document:
        """A document from a string; sections are detected (Markdown rules when ``name`` ends in .md)."""
        if not text.strip():
            raise EmptyDocumentError(f"Document {name!r} is blank: pass text with some content.")
        markdown = name.lower().endswith(_MARKDOWN_SUFFIXES)
        return cls(name=name, text=text, sections=_detect_sections(text, markdown=markdown))

    @cached_property
    def _page_starts(self) -> list[int]:
        return [p.start for p in self.pages]

    def _page_index(self, offset: int) -> int | None:
        if not self.pages or not 0 <= offset <= len(self.text):
            return None
        return max(bisect_right(self._page_starts, offset) - 1, 0)

    def page_of(self, offset: int) -> int | None:
        """The number of the page containing character ``offset``; None without pages or out of range.

        The blank line between two pages counts as part of the earlier page.
        """
        i = self._page_index(offset)
        return None if i is None else self.pages[i].number

    def pages_between(self, start: int, end: int) -> tuple[int, ...]:
        """Numbers of the pages that ``text[start:end]`` touches, in order (empty pages in between included)."""
        if not self.pages:
            return ()
        start = min(max(start, 0), len(self.text))
        end = min(max(end, start + 1), len(self.text))
        first, last = self._page_index(start), self._page_index(max(end - 1, start))
        if first is None or last is None:
            return ()
        return tuple(p.number for p in self.pages[first : last + 1])

    def describe(self) -> dict[str, Any]:
        """What a remote planner may see about this document: sizes and headings, never the text."""
        titles = [s.title for s in self.sections[:_MAX_DESCRIBED_SECTIONS]]
        return {
            "name": self.name,
            "characters": len(self.text),
            "approx_tokens": len(self.text) // 4,
            "pages": len(self.pages),
            "sections": titles,
            "sections_total": len(self.sections),
        }


# ---------------------------------------------------------------------------------------------------------
# Section detection
# ---------------------------------------------------------------------------------------------------------

_FENCE = re.compile(r" {0,3}(```|~~~)")
_MD_HEADING = re.compile(r"#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?")
_BOLD_LINE = re.compile(r"\*\*([^*\n]{2,80}?)\*\*:?")
_ITEM = re.compile(r"(?:ITEM|Item)[ \t]+\d{1,2}[A-Z]?(?:[ \t]*[.:—–-].*)?")
_PART = re.compile(r"(?:PART|Part)[ \t]+[IVX]{1,4}(?:[ \t]*[.:—–-].*)?")
_NUMBERED = re.compile(r"\d{1,2}(?:\.\d{1,2}){0,3}\.?[ \t]+([A-Z][^\n]{1,70})")
_CAPS_FRAGMENT = re.compile(r"[A-Z]{1,5}[.:]?")
# A run of at least this many plain-text headings, each over less than _TOC_BODY non-space characters, is a
# table of contents ("RISK FACTORS 10 / PROPERTIES 12 / ..."), not a set of sections.
_TOC_RUN = 4
_TOC_BODY = 40


@dataclass(frozen=True, slots=True)
class _Head:
    start: int
    title: str
    kind: Literal["markup", "filing", "plain"]
    """markup: Markdown or bold line; filing: "Item 7." / "PART II"; plain: numbered or ALL-CAPS line."""


def _is_filing_label(line: str) -> bool:
    return bool(_ITEM.fullmatch(line) or _PART.fullmatch(line))


def _is_plain_heading(line: str) -> bool:
    """Whether a stripped plain-text line looks like a numbered ("3.1 Results") or ALL-CAPS heading."""
    if len(line) > _MAX_TITLE_CHARS:
        return False
    m = _NUMBERED.fullmatch(line)
    if m and not line.endswith((".", ",", ";", ":", "!", "?")) and len(m.group(1).split()) <= 10:
        return True
    letters = [c for c in line if c.isalpha()]
    nonspace = sum(not c.isspace() for c in line)
    words = [w for w in line.split() if any(c.isalpha() for c in w)]
    return (
        4 <= len(line) <= 80
        and len(letters) >= 4
        and all(c.isupper() for c in letters)
        and len(letters) >= 0.6 * nonspace
        and (len(words) >= 2 or len(letters) >= 8)
        and not line.endswith(",")
    )


def _following(lines: list[str], i: int, n: int) -> list[str]:
    """Up to ``n`` non-blank lines after line ``i``, right-stripped."""
    return [line.rstrip() for line in lines[i + 1 : i + 1 + 2 * n] if line.strip()][:n]


def _complete_filing_title(label: str, lines: list[str], i: int) -> str:
    """Complete a bare label ("Item 7.") with the lines after it, as PDFs of filings split titles over lines.

    The next line is the start of the title. pypdf breaks titles mid-word into fragments separated by blank
    lines ("Busines" / "" / "s."), so such fragments are glued on without a space (unless they start with
    one). Stops at a title that ends with a period, a long line, a line that follows without a blank line
    (the body), or another heading.
    """
    title, blank = label, False
    for line in lines[i + 1 : i + 12]:
        fragment = line.rstrip()
        stripped = fragment.strip()
        if not stripped:
            blank = True
            continue
        if title != label and not blank:
            break
        if len(fragment) > 100 or len(title) + len(fragment) > 160:
            break
        if _is_filing_label(stripped) or _is_plain_heading(stripped):
            break
        title = f"{title} {stripped}" if title == label else title + fragment
        if title.endswith("."):
            break
        blank = False
    return title


def _detect_sections(text: str, *, markdown: bool = False) -> tuple[Section, ...]:
    """Headings found line by line: Markdown ``#`` and bold lines always; filing items ("Item 7."),
    "PART II", numbered ("3.1 Results") and ALL-CAPS lines unless ``markdown``. Fenced code is skipped."""
    lines = text.splitlines(keepends=True)
    heads: list[_Head] = []
    offset, in_fence = 0, False
    for i, raw in enumerate(lines):
        line = raw.strip()
        start, offset = offset, offset + len(raw)
        if _FENCE.match(raw):
            in_fence = not in_fence
            continue
        if in_fence or not line:
            continue
        if m := _MD_HEADING.fullmatch(line):
            heads.append(_Head(start, m.group(1), "markup"))
        elif m := _BOLD_LINE.fullmatch(line):
            heads.append(_Head(start, m.group(1).strip().rstrip(":"), "markup"))
        elif markdown or len(line) > _MAX_TITLE_CHARS:
            continue
        elif _is_filing_label(line):
            bare = line.endswith((".", ":")) and len(line.split(maxsplit=2)) == 2
            heads.append(_Head(start, _complete_filing_title(line, lines, i) if bare else line, "filing"))
        elif _is_plain_heading(line):
            # PDFs also split ALL-CAPS titles mid-word: "RESULTS OF OPERATI" / "ONS".
            nxt = _following(lines, i, 1)
            glue = nxt and _CAPS_FRAGMENT.fullmatch(nxt[0].strip()) and line.isupper()
            heads.append(_Head(start, line + nxt[0].strip() if glue else line, "plain"))
    heads = _drop_tables_of_contents(text, _dedupe_filing_labels(text, heads))
    sections = []
    for k, head in enumerate(heads):
        end = heads[k + 1].start if k + 1 < len(heads) else len(text)
        title = " ".join(head.title.split())
        if len(title) > _MAX_TITLE_CHARS:
            title = title[: _MAX_TITLE_CHARS - 1] + "…"
        sections.append(Section(title, head.start, end))
    return tuple(sections)


def _body_sizes(text: str, heads: list[_Head]) -> list[int]:
    """Non-space characters under each heading, up to the next one, not counting the title."""
    sizes = []
    for k, head in enumerate(heads):
        end = heads[k + 1].start if k + 1 < len(heads) else len(text)
        sizes.append(sum(map(len, text[head.start : end].split())) - sum(map(len, head.title.split())))
    return sizes


def _dedupe_filing_labels(text: str, heads: list[_Head]) -> list[_Head]:
    """Keep one heading per filing label ("ITEM 7A", "PART II"): the one with the most text under it.

    A 10-K names every item twice or three times: in its table of contents, at the item itself, and
    sometimes in a cross-reference index at the end. Only the item itself has a body; an entry of a table
    of contents has a short one that ends with a page number ("Unresolved Staff Comments 12").
    """
    sizes = _body_sizes(text, heads)

    def score(k: int) -> tuple[bool, int]:
        end = heads[k + 1].start if k + 1 < len(heads) else len(text)
        last = text[heads[k].start : end].rsplit(maxsplit=1)[-1]
        return not (sizes[k] < 300 and last.isdigit() and len(last) <= 3), sizes[k]

    best: dict[str, int] = {}
    for k, head in enumerate(heads):
        if head.kind == "filing":
            label = " ".join(head.title.upper().replace(":", ".").split()[:2]).rstrip(".:—–-")
            if label not in best or score(k) > score(best[label]):
                best[label] = k
    keep = set(best.values())
    return [h for k, h in enumerate(heads) if h.kind != "filing" or k in keep]


def _drop_tables_of_contents(text: str, heads: list[_Head]) -> list[_Head]:
    """Drop runs of plain-text headings with almost nothing under them: tables of contents and the like."""
    sizes = _body_sizes(text, heads)
    tiny = [h.kind != "markup" and size < _TOC_BODY for h, size in zip(heads, sizes, strict=True)]
    keep = [True] * len(heads)
    k = 0
    while k < len(heads):
        run = k
        while run < len(heads) and tiny[run]:
            run += 1
        if run - k >= _TOC_RUN:
            keep[k:run] = [False] * (run - k)
        k = max(run, k + 1)
    return [h for h, kept in zip(heads, keep, strict=True) if kept]


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------


def load_document(path: str | os.PathLike[str], *, cache: bool = True, workers: int | None = None) -> Document:
    """Load one file. ``cache``: reuse/keep extracted PDF text on disk; ``workers``: PDF extraction processes
    (None picks from the CPU count; 1 extracts in this process).

    Raises DocumentNotFoundError, UnreadableDocumentError or EmptyDocumentError with a one-line fix.
    """
    p = Path(path).expanduser()
    where = str(p)
    if not p.exists():
        raise DocumentNotFoundError(f"No such file: {where}: check the path.", path=where)
    if p.is_dir():
        raise UnreadableDocumentError(
            f"{where} is a directory: pass the files inside it (e.g. {where}/*.pdf).", path=where
        )
    suffix = p.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise UnreadableDocumentError(
            f"Cannot read {where}: unsupported file type {suffix or '(none)'!r}; convert it to one of "
            f"{', '.join(SUPPORTED_SUFFIXES)}.",
            path=where,
        )
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UnreadableDocumentError(
            f"Cannot read {where} ({exc.strerror}): check its permissions.", path=where
        ) from exc
    if not data.strip():
        raise EmptyDocumentError(f"{where} is empty: pass a file with text in it.", path=where)
    if suffix == ".pdf":
        doc = _load_pdf(p, data, cache=cache, workers=workers)
    elif suffix == ".docx":
        doc = _load_docx(p, data)
    elif suffix in (".html", ".htm"):
        doc = _load_html(p, data)
    else:
        doc = _load_text(p, data)
    if not doc.text.strip():
        raise EmptyDocumentError(f"{where} contains no text: pass a file with text in it.", path=where)
    log.debug("loaded %s: %d chars, %d pages, %d sections", where, len(doc.text), len(doc.pages), len(doc.sections))
    return doc


def load_documents(paths: Iterable[str | os.PathLike[str]], *, cache: bool = True) -> list[Document]:
    """Load several files in order; the first that fails raises."""
    return [load_document(p, cache=cache) for p in paths]


def _decode(data: bytes) -> tuple[str, str]:
    """Text and the encoding used: a BOM's, else utf-8, else latin-1 (which never fails)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16"), "utf-16"
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


def _load_text(p: Path, data: bytes) -> Document:
    text, encoding = _decode(data)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    markdown = p.suffix.lower() in _MARKDOWN_SUFFIXES
    return Document(
        name=p.name,
        text=text,
        path=str(p),
        sections=_detect_sections(text, markdown=markdown),
        metadata={"format": "markdown" if markdown else "text", "encoding": encoding, "bytes": len(data)},
    )


def _sections_from_heads(heads: list[tuple[str, int]], length: int) -> tuple[Section, ...]:
    """Sections from (title, start) pairs in text order; each ends where the next begins."""
    return tuple(
        Section(" ".join(title.split())[:_MAX_TITLE_CHARS], start, heads[k + 1][1] if k + 1 < len(heads) else length)
        for k, (title, start) in enumerate(heads)
    )


# --- HTML ------------------------------------------------------------------------------------------------

_BLOCK_TAGS = frozenset(
    {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure"}
    | {"footer", "form", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section"}
    | {"table", "tbody", "thead", "tfoot", "tr", "ul"}
)
_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "svg"})
_HEADING_TAGS = frozenset({"h1", "h2", "h3"})


class _HTMLText(HTMLParser):
    """Visible text of an HTML page with block structure kept as line breaks, and h1-h3 positions."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.length = 0
        self.heads: list[tuple[str, int]] = []
        self.title = ""
        self._newlines = 2  # pretend the text starts after a paragraph break: no leading blank lines
        self._space = False
        self._skip = 0
        self._pre = 0
        self._in_title = False
        self._heading: tuple[int, int] | None = None  # (start offset, index into parts)

    def _add(self, s: str) -> None:
        self.parts.append(s)
        self.length += len(s)

    def _break(self, n: int) -> None:
        self._space = False
        if self._newlines < n:
            self._add("\n" * (n - self._newlines))
            self._newlines = n

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _HEADING_TAGS:
            self._break(2)
            self._heading = (self.length, len(self.parts))
        elif tag in _BLOCK_TAGS:
            self._break(2 if tag in ("p", "table", "blockquote", "pre") else 1)
            self._pre += tag == "pre"
        elif tag in ("td", "th") and self._newlines == 0:
            self._add(" | ")
            self._space = False

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(self._skip - 1, 0)
        elif tag == "title":
            self._in_title = False
        elif tag in _HEADING_TAGS and self._heading is not None:
            start, first = self._heading
            title = "".join(self.parts[first:]).strip()
            if title:
                self.heads.append((title, start))
            self._heading = None
            self._break(2)
        elif tag in _BLOCK_TAGS:
            self._break(2 if tag in ("p", "table", "blockquote", "pre") else 1)
            self._pre = max(self._pre - (tag == "pre"), 0)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title += data
            return
        if self._pre:
            if data:
                self._add(data)
                self._newlines = len(data) - len(data.rstrip("\n"))
            return
        words = data.split()
        if not words:
            self._space = self._space or (bool(data) and self._newlines == 0)
            return
        lead = " " if (self._space or data[0].isspace()) and self._newlines == 0 else ""
        self._add(lead + " ".join(words))
        self._newlines = 0
        self._space = data[-1].isspace()


def _load_html(p: Path, data: bytes) -> Document:
    raw, encoding = _decode(data)
    parser = _HTMLText()
    parser.feed(raw)
    parser.close()
    text = "".join(parser.parts).rstrip()
    heads = [(t, s) for t, s in parser.heads if s < len(text)]
    sections = _sections_from_heads(heads, len(text)) if heads else _detect_sections(text)
    metadata = {"format": "html", "encoding": encoding, "bytes": len(data)}
    if parser.title.strip():
        metadata["title"] = " ".join(parser.title.split())
    return Document(name=p.name, text=text, path=str(p), sections=sections, metadata=metadata)


# --- .docx -----------------------------------------------------------------------------------------------

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING_STYLE = re.compile(r"(heading|title)\s*[1-3]?", re.IGNORECASE)


def _docx_paragraph(p: ElementTree.Element) -> tuple[str, bool]:
    """A w:p element's text, and whether its style or outline level makes it a heading (levels 1-3)."""
    out = []
    for el in p.iter():
        if el.tag == f"{_W}t":
            out.append(el.text or "")
        elif el.tag == f"{_W}tab":
            out.append("\t")
        elif el.tag in (f"{_W}br", f"{_W}cr"):
            out.append("\n")
    style = p.find(f"{_W}pPr/{_W}pStyle")
    level = p.find(f"{_W}pPr/{_W}outlineLvl")
    heading = (style is not None and bool(_HEADING_STYLE.fullmatch(style.get(f"{_W}val", "")))) or (
        level is not None and level.get(f"{_W}val", "9") in ("0", "1", "2")
    )
    return "".join(out).strip(), heading


def _docx_blocks(container: ElementTree.Element) -> Iterable[tuple[str, bool]]:
    """Paragraphs and tables of a body, in order; a table is one block, a row a line, cells split by " | "."""
    for el in container:
        if el.tag == f"{_W}p":
            yield _docx_paragraph(el)
        elif el.tag == f"{_W}tbl":
            rows = []
            for tr in el.iter(f"{_W}tr"):
                cells = [" ".join(_docx_paragraph(p)[0] for p in tc.iter(f"{_W}p")) for tc in tr.findall(f"{_W}tc")]
                rows.append(" | ".join(c.strip() for c in cells))
            yield "\n".join(rows).strip(), False
        elif el.tag == f"{_W}sdt":
            content = el.find(f"{_W}sdtContent")
            if content is not None:
                yield from _docx_blocks(content)


def _load_docx(p: Path, data: bytes) -> Document:
    where = str(p)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            xml = z.read("word/document.xml")
        body = ElementTree.fromstring(xml).find(f"{_W}body")
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError, ValueError) as exc:
        raise UnreadableDocumentError(
            f"{where} is not a readable .docx ({exc}): re-save it from Word or export it as PDF or text.",
            path=where,
        ) from exc
    parts: list[str] = []
    heads: list[tuple[str, int]] = []
    length = 0
    for text, heading in _docx_blocks(body if body is not None else ElementTree.Element("body")):
        if not text:
            continue
        if parts:
            parts.append("\n\n")
            length += 2
        if heading:
            heads.append((text, length))
        parts.append(text)
        length += len(text)
    text = "".join(parts)
    sections = _sections_from_heads(heads, len(text)) if heads else _detect_sections(text)
    return Document(
        name=p.name, text=text, path=where, sections=sections, metadata={"format": "docx", "bytes": len(data)}
    )


# --- PDF -------------------------------------------------------------------------------------------------

# Bump when the cleaning of extracted text changes, so that cached text is extracted again.
_PDF_CACHE_FORMAT = 1
_PARALLEL_MIN_PAGES = 24
_PAGES_PER_WORKER_MIN = 12


def _clean_page(text: str) -> str:
    """Drop trailing spaces on lines and runs of blank lines, which pypdf emits in large numbers."""
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _open_pdf(source: Any, where: str) -> Any:
    """A pypdf reader, decrypted with the empty password if needed; UnreadableDocumentError otherwise."""
    import pypdf
    from pypdf.errors import DependencyError, PyPdfError

    try:
        reader = pypdf.PdfReader(source)
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise UnreadableDocumentError(
                f"{where} is encrypted: decrypt it first (qpdf --password=... --decrypt in.pdf out.pdf) "
                "and pass the decrypted copy.",
                path=where,
            )
        len(reader.pages)  # parses the page tree: a broken one fails here rather than halfway through
    except DependencyError as exc:
        raise UnreadableDocumentError(
            f"{where} is encrypted with AES: pip install cryptography, or decrypt it first "
            "(qpdf --decrypt in.pdf out.pdf) and pass the decrypted copy.",
            path=where,
        ) from exc
    except (PyPdfError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        raise UnreadableDocumentError(
            f"{where} is not a readable PDF ({exc}): check the file is complete, or repair it "
            "(qpdf in.pdf out.pdf) and pass the repaired copy.",
            path=where,
        ) from exc
    return reader


def _extract_range(where: str, first: int, stop: int) -> list[tuple[str, str | None]]:
    """Text of pages ``first..stop-1`` of the PDF at ``where`` as (text, error); runs in worker processes."""
    return _extract_reader_pages(_open_pdf(where, where), first, stop)


def _extract_reader_pages(reader: Any, first: int, stop: int) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for i in range(first, stop):
        try:
            out.append((_clean_page(reader.pages[i].extract_text()), None))
        # pypdf parses untrusted content streams: whatever one page raises, the other pages must survive.
        except Exception as exc:
            out.append(("", f"{type(exc).__name__}: {exc}"))
    return out


def _worker_count(pages: int, workers: int | None) -> int:
    if workers is not None:
        return max(1, min(workers, pages))
    if pages < _PARALLEL_MIN_PAGES:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, pages // _PAGES_PER_WORKER_MIN, 16))


def _can_fork() -> bool:
    # Forking is only safe from a process with one thread (a lock held by another thread would stay locked
    # in the child forever), and daemonic processes may not have children. Other start methods re-import the
    # caller's __main__, which breaks scripts without an ``if __name__ == "__main__"`` guard.
    return (
        sys.platform != "win32"
        and "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
        and not multiprocessing.current_process().daemon
    )


def _extract_pages(reader: Any, where: str, workers: int) -> list[tuple[str, str | None]]:
    """(text, error) for every page: in ``workers`` forked processes when that is safe, else here."""
    n_pages = len(reader.pages)
    if workers > 1 and _can_fork():
        step = -(-n_pages // workers)
        ranges = [(where, a, min(a + step, n_pages)) for a in range(0, n_pages, step)]
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=len(ranges), mp_context=ctx) as pool:
                chunks = list(pool.map(_extract_range, *zip(*ranges, strict=True)))
            return [page for chunk in chunks for page in chunk]
        except (OSError, RuntimeError, UnreadableDocumentError) as exc:  # BrokenProcessPool is a RuntimeError
            log.warning("parallel PDF extraction failed (%s); extracting %s in this process", exc, where)
    return _extract_reader_pages(reader, 0, n_pages)


def _cache_path(digest: str) -> Path:
    return cache_dir() / "pdf-text" / f"{digest}.json"


def _extractor_id() -> str:
    import pypdf

    return f"pypdf {pypdf.__version__} / {_PDF_CACHE_FORMAT}"


def _read_cache(digest: str) -> dict[str, Any] | None:
    path = _cache_path(digest)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable PDF text cache entry %s (%s)", path, exc)
        return None
    if not isinstance(entry, dict) or entry.get("extractor") != _extractor_id():
        return None
    pages = entry.get("pages")
    if not isinstance(pages, list) or not all(isinstance(t, str) for t in pages):
        return None
    return entry


def _write_cache(digest: str, entry: dict[str, Any]) -> None:
    """Write atomically (temporary file, then rename) so that a concurrent reader never sees half a file."""
    path = _cache_path(digest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{digest[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log.warning("could not cache extracted PDF text at %s (%s)", path, exc)


def _load_pdf(p: Path, data: bytes, *, cache: bool, workers: int | None) -> Document:
    where = str(p)
    digest = hashlib.sha256(data).hexdigest()
    entry = _read_cache(digest) if cache else None
    if entry is not None:
        log.debug("PDF text of %s from cache %s", where, _cache_path(digest))
    else:
        reader = _open_pdf(io.BytesIO(data), where)
        extracted = _extract_pages(reader, where, _worker_count(len(reader.pages), workers))
        failed = [i + 1 for i, (_, err) in enumerate(extracted) if err is not None]
        for number in failed:
            log.warning(
                "%s: page %d: text extraction failed (%s); keeping it as an empty page",
                where,
                number,
                extracted[number - 1][1],
            )
        entry = {"extractor": _extractor_id(), "pages": [t for t, _ in extracted], "failed_pages": failed}
        if cache:
            _write_cache(digest, entry)
    texts: list[str] = entry["pages"]
    if not any(t.strip() for t in texts):
        raise EmptyDocumentError(
            f"{where} has no text layer (a scan?): run OCR on it first (ocrmypdf in.pdf out.pdf) and pass the result.",
            path=where,
        )
    pages, offset = [], 0
    for number, t in enumerate(texts, start=1):
        if number > 1:
            offset += len(_PAGE_SEPARATOR)
        pages.append(Page(number, offset, offset + len(t)))
        offset += len(t)
    text = _PAGE_SEPARATOR.join(texts)
    return Document(
        name=p.name,
        text=text,
        path=where,
        pages=tuple(pages),
        sections=_detect_sections(text),
        metadata={
            "format": "pdf",
            "sha256": digest,
            "bytes": len(data),
            "failed_pages": list(entry.get("failed_pages", [])),
        },
    )
