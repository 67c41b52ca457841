"""Plain text and Markdown files, and the decoding that HTML shares."""

from __future__ import annotations

from pathlib import Path

from minions.documents.sections import detect_sections
from minions.documents.types import MARKDOWN_SUFFIXES, Document

__all__ = ["decode", "load_text"]


def decode(data: bytes) -> tuple[str, str]:
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


def load_text(p: Path, data: bytes) -> Document:
    text, encoding = decode(data)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    markdown = p.suffix.lower() in MARKDOWN_SUFFIXES
    return Document(
        name=p.name,
        text=text,
        path=str(p),
        sections=detect_sections(text, markdown=markdown),
        metadata={"format": "markdown" if markdown else "text", "encoding": encoding, "bytes": len(data)},
    )
