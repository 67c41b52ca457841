"""The document model: full text, with pages and sections as character offsets into it."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from minions.documents.sections import Section, detect_sections
from minions.errors import EmptyDocumentError
from minions.unicode import valid_text

__all__ = ["MARKDOWN_SUFFIXES", "Document", "Page", "Section"]

MARKDOWN_SUFFIXES: tuple[str, ...] = (".md", ".markdown")
_MAX_DESCRIBED_SECTIONS = 50


@dataclass(frozen=True, slots=True)
class Page:
    number: int
    """1-based page number."""
    start: int
    """Offset of the page's first character within ``Document.text``."""
    end: int
    """Offset one past its last character (``start == end`` for a page without text)."""


@dataclass(frozen=True)
class Document:
    """A loaded document: its full text, and pages and sections as offsets into that text."""

    name: str
    text: str = field(repr=False)
    path: str | None = None
    pages: tuple[Page, ...] = field(default=(), repr=False)
    sections: tuple[Section, ...] = field(default=(), repr=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Every document passes here, however it was made: text a tokenizer, SQLite or a file name cannot take
        # (a surrogate, NUL) is replaced, at the same length so that pages and sections stay where they are,
        # and counted in the metadata (``replaced_characters``) for the run's notes.
        text, in_text = valid_text(self.text)
        name, in_name = valid_text(self.name)
        if in_text or in_name:
            object.__setattr__(self, "text", text)
            object.__setattr__(self, "name", name)
            replaced = in_text + in_name + int(self.metadata.get("replaced_characters", 0))
            object.__setattr__(self, "metadata", {**self.metadata, "replaced_characters": replaced})

    @property
    def replaced_characters(self) -> int:
        """How many characters of the source were not valid Unicode and were replaced with U+FFFD."""
        return int(self.metadata.get("replaced_characters", 0))

    @classmethod
    def from_text(cls, text: str, name: str = "document") -> Document:
        """A document from a string; sections are detected (Markdown rules when ``name`` ends in .md)."""
        if not text.strip():
            raise EmptyDocumentError(f"Document {name!r} is blank: pass text with some content.")
        markdown = name.lower().endswith(MARKDOWN_SUFFIXES)
        return cls(name=name, text=text, sections=detect_sections(text, markdown=markdown))

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
