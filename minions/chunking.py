"""Chunking: split a ``Document`` into ``Chunk``s that a small local model reads one at a time.

Every chunk is an exact, stripped slice of its document (``doc.text[c.start:c.end] == c.text``), never empty,
and carries its provenance: the pages it spans and the section its start lies in.

    by="chars"     windows of about ``size`` characters, ``overlap`` characters repeated; in a document with pages,
                   windows never cross a page break (each page is cut on its own)
    by="tokens"    windows of at most ``size`` tokens (``count_tokens``), ``overlap`` tokens repeated
    by="pages"     ``size`` pages per chunk, ``overlap`` pages repeated; documents without pages fall back
                   to "chars" with ``size * CHARS_PER_PAGE`` characters
    by="sections"  one chunk per section (text before the first one is a chunk too); a section longer than
                   ``size`` characters is split by the "chars" rule; no sections: "chars"

A window ends at the last paragraph break within its final fifth, else the last sentence end there, else
the last whitespace, else exactly at ``size``.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any, Literal, get_args

from minions.documents import Document

__all__ = ["CHARS_PER_PAGE", "DEFAULT_CHUNK_SIZE", "Chunk", "ChunkBy", "chunk_document", "chunk_documents"]

log = logging.getLogger(__name__)

ChunkBy = Literal["chars", "tokens", "pages", "sections"]
CHARS_PER_PAGE = 3000
"""Characters that stand for one page when a document without pages is chunked by pages."""
DEFAULT_CHUNK_SIZE = 1200
"""Characters per chunk: small enough for a small model to read in one go and to rank well (FinanceBench page
recall by BM25 was best at 1200 of 800, 1200 and 1500). The protocols' ``RunOptions.chunk_size`` default."""

_BREAK_ZONE = 0.2  # breaks are looked for in the last fifth of a window
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*(?=\s)")
_WHITESPACE = re.compile(r"\s")
_NON_SPACE = re.compile(r"\S")


@dataclass(frozen=True, slots=True)
class Chunk:
    document: str
    """``Document.name`` of the document it comes from."""
    index: int
    """0-based position among this document's chunks."""
    text: str
    start: int
    """Character offsets into ``Document.text``: ``text == doc.text[start:end]``."""
    end: int
    pages: tuple[int, ...] = ()
    """Page numbers it spans (empty for documents without pages)."""
    section: str | None = None
    """Title of the section containing its start, if any."""

    def provenance(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "chunk": self.index,
            "start": self.start,
            "end": self.end,
            "pages": list(self.pages),
            "section": self.section,
        }

    @property
    def label(self) -> str:
        """Where it comes from, for people: "report.pdf p.3-4", "notes.md §Results", "notes.txt #2" (1-based)."""
        if self.pages:
            first, last = self.pages[0], self.pages[-1]
            return f"{self.document} p.{first}" if first == last else f"{self.document} p.{first}-{last}"
        if self.section:
            title = self.section if len(self.section) <= 40 else self.section[:39] + "…"
            return f"{self.document} §{title}"
        return f"{self.document} #{self.index + 1}"


def chunk_document(
    doc: Document,
    by: ChunkBy = "chars",
    size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = 0,
    *,
    count_tokens: Callable[[str], int] | None = None,
) -> list[Chunk]:
    """Split ``doc`` into chunks; ``size`` and ``overlap`` are in the unit of ``by`` (see the module doc).

    ``count_tokens`` measures tokens for ``by="tokens"`` (default: ``minions.tokens.count_tokens``).
    Raises ValueError for an unknown ``by``, ``size <= 0``, ``overlap < 0`` or ``overlap >= size``.
    """
    _check_arguments(by, size, overlap)
    text = doc.text
    spans: Iterator[tuple[int, int]]
    if by == "pages" and not doc.pages:
        log.info("%s has no pages; chunking by %d characters instead", doc.name, size * CHARS_PER_PAGE)
        spans = _char_spans(text, 0, len(text), size * CHARS_PER_PAGE, overlap * CHARS_PER_PAGE)
    elif by == "pages":
        spans = _page_spans(doc, size, overlap)
    elif by == "sections" and not doc.sections:
        log.info("%s has no sections; chunking by %d characters instead", doc.name, size)
        spans = _char_spans(text, 0, len(text), size, overlap)
    elif by == "sections":
        spans = (s for lo, hi in _section_regions(doc) for s in _char_spans(text, lo, hi, size, overlap))
    elif by == "tokens":
        if count_tokens is None:
            from minions.tokens import count_tokens as default_counter

            count_tokens = default_counter
        spans = _token_spans(text, size, overlap, count_tokens)
    elif doc.pages:  # a chunk stays within its page, so that whatever is quoted from it has one page
        spans = (s for p in doc.pages for s in _char_spans(text, p.start, p.end, size, overlap))
    else:
        spans = _char_spans(text, 0, len(text), size, overlap)
    return _make_chunks(doc, spans)


def chunk_documents(
    docs: Sequence[Document],
    by: ChunkBy = "chars",
    size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = 0,
    *,
    count_tokens: Callable[[str], int] | None = None,
) -> list[Chunk]:
    """``chunk_document`` over several documents, in order; each document's indexes start at 0."""
    return [c for doc in docs for c in chunk_document(doc, by, size, overlap, count_tokens=count_tokens)]


def _check_arguments(by: str, size: int, overlap: int) -> None:
    if by not in get_args(ChunkBy):
        raise ValueError(f"Unknown chunking by={by!r}: use one of {', '.join(get_args(ChunkBy))}.")
    if size <= 0:
        raise ValueError(f"Chunk size must be positive, got size={size}.")
    if overlap < 0 or overlap >= size:
        raise ValueError(f"Chunk overlap must be at least 0 and smaller than size={size}, got overlap={overlap}.")


def _make_chunks(doc: Document, spans: Iterator[tuple[int, int]]) -> list[Chunk]:
    """Chunks from (start, end) spans: whitespace stripped from both ends, empty spans dropped."""
    text = doc.text
    section_starts = [s.start for s in doc.sections]
    chunks: list[Chunk] = []
    for lo, hi in spans:
        m = _NON_SPACE.search(text, lo, hi)
        if m is None:
            continue
        start = m.start()
        end = start + len(text[start:hi].rstrip())
        chunks.append(
            Chunk(
                document=doc.name,
                index=len(chunks),
                text=text[start:end],
                start=start,
                end=end,
                pages=doc.pages_between(start, end),
                section=_section_at(doc, section_starts, start),
            )
        )
    return chunks


def _section_at(doc: Document, starts: list[int], offset: int) -> str | None:
    i = bisect_right(starts, offset) - 1
    if i < 0 or offset >= doc.sections[i].end:
        return None
    return doc.sections[i].title


def _break_before(text: str, start: int, limit: int) -> int:
    """Where a window ``text[start:limit]`` should end: a paragraph break, a sentence end or whitespace in
    its last fifth, the first one found in that order of preference; else ``limit``."""
    zone = max(start + 1, limit - int((limit - start) * _BREAK_ZONE))
    stop = min(limit + 1, len(text))  # whitespace right at ``limit`` is a clean break too
    for pattern in (_PARAGRAPH, _SENTENCE_END, _WHITESPACE):
        matches = list(pattern.finditer(text, zone, stop))
        if matches:
            return matches[-1].end() if pattern is _SENTENCE_END else matches[-1].start()
    return limit


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Where the window after ``text[start:end]`` begins: ``overlap`` characters back, at a word start."""
    if overlap <= 0:
        return end
    pos = max(end - overlap, start + 1)
    m = _WHITESPACE.search(text, pos - 1, end)
    return m.end() if m is not None and m.end() < end else pos


def _char_spans(text: str, lo: int, hi: int, size: int, overlap: int) -> Iterator[tuple[int, int]]:
    """Windows of at most ``size`` characters covering ``text[lo:hi]``."""
    pos = lo
    while pos < hi:
        m = _NON_SPACE.search(text, pos, hi)
        if m is None:
            return
        pos = m.start()
        end = hi if pos + size >= hi else _break_before(text, pos, pos + size)
        yield pos, end
        if end >= hi:
            return
        pos = _next_start(text, pos, end, overlap)


def _chars_per_token(text: str, count_tokens: Callable[[str], int]) -> float:
    """Characters per token, measured on the whole text or, for long texts, on ten 10,000-char samples."""
    if len(text) <= 100_000:
        sample = text
    else:
        step = len(text) // 10
        sample = "".join(text[i : i + 10_000] for i in range(0, len(text), step))
    tokens = count_tokens(sample)
    return len(sample) / tokens if tokens > 0 else 4.0


def _token_spans(text: str, size: int, overlap: int, count_tokens: Callable[[str], int]) -> Iterator[tuple[int, int]]:
    """Windows of at most ``size`` tokens (a window of one character may exceed it).

    The window in characters comes from a running chars-per-token estimate; each window is counted once, and
    again only when it is too long (shrink) or much too short (grow), so the text is counted about twice.
    """
    ratio = _chars_per_token(text, count_tokens)
    pos, hi = 0, len(text)
    while pos < hi:
        m = _NON_SPACE.search(text, pos, hi)
        if m is None:
            return
        pos = m.start()
        chars = max(1, int(size * ratio))
        best: tuple[int, int] | None = None  # (end, tokens) of the longest window that fits
        for attempt in count(1):
            end = hi if pos + chars >= hi else _break_before(text, pos, pos + chars)
            tokens = count_tokens(text[pos:end].rstrip())
            fits = tokens <= size or end - pos <= 1
            if fits and (best is None or end > best[0]):
                best = (end, tokens)
            # Stop once something fits and it is long enough, or growing it failed or went on long enough.
            # Shrinking always ends: every retry is at most 95% of the last window, down to one character.
            if best is not None and (not fits or end >= hi or tokens >= 0.85 * size or attempt >= 4):
                break
            # aim a little under the budget: token counts do not grow linearly with characters
            chars = max(1, int((end - pos) * size / max(tokens, 1) * 0.95))
        assert best is not None  # the loop above only breaks once a window fits
        end, tokens = best
        if tokens > 0:
            ratio = 0.5 * ratio + 0.5 * (end - pos) / tokens
        yield pos, end
        if end >= hi:
            return
        pos = _next_start(text, pos, end, int(overlap * ratio))


def _page_spans(doc: Document, size: int, overlap: int) -> Iterator[tuple[int, int]]:
    """``size`` pages per window, each window starting ``size - overlap`` pages after the previous one."""
    pages = doc.pages
    for first in range(0, len(pages), size - overlap):
        last = min(first + size, len(pages)) - 1
        yield pages[first].start, pages[last].end
        if last == len(pages) - 1:
            return


def _section_regions(doc: Document) -> Iterator[tuple[int, int]]:
    """The text before the first section, each section, and any text between or after them, in order."""
    cursor = 0
    for section in sorted(doc.sections, key=lambda s: s.start):
        if section.start > cursor:
            yield cursor, section.start
        if section.end > max(section.start, cursor):
            yield max(section.start, cursor), section.end
        cursor = max(cursor, section.end)
    if cursor < len(doc.text):
        yield cursor, len(doc.text)
