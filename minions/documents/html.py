"""HTML pages: the visible text with block structure kept as line breaks; h1-h3 are the sections."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from minions.documents.sections import detect_sections, sections_from_heads
from minions.documents.text import decode
from minions.documents.types import Document

__all__ = ["load_html"]

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


def load_html(p: Path, data: bytes) -> Document:
    raw, encoding = decode(data)
    parser = _HTMLText()
    parser.feed(raw)
    parser.close()
    text = "".join(parser.parts).rstrip()
    heads = [(t, s) for t, s in parser.heads if s < len(text)]
    sections = sections_from_heads(heads, len(text)) if heads else detect_sections(text)
    metadata = {"format": "html", "encoding": encoding, "bytes": len(data)}
    if parser.title.strip():
        metadata["title"] = " ".join(parser.title.split())
    return Document(name=p.name, text=text, path=str(p), sections=sections, metadata=metadata)
