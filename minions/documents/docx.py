"""Word .docx files: paragraphs and tables from word/document.xml; heading styles are the sections."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path
from xml.etree import ElementTree

from minions.documents.sections import detect_sections, sections_from_heads
from minions.documents.types import Document
from minions.errors import UnreadableDocumentError

__all__ = ["load_docx"]

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


def load_docx(p: Path, data: bytes, *, where: str | None = None) -> Document:
    """``where``: what errors call the file (default: its path)."""
    where = where or str(p)
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
    sections = sections_from_heads(heads, len(text)) if heads else detect_sections(text)
    return Document(
        name=p.name, text=text, path=str(p), sections=sections, metadata={"format": "docx", "bytes": len(data)}
    )
