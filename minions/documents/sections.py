"""Section detection: headings found line by line in plain text, Markdown, and text extracted from PDFs.

Markdown ``#`` headings and bold lines always count; filing items ("Item 7.", "PART II"), numbered headings
("3.1 Results") and ALL-CAPS lines count outside Markdown. Runs of headings with almost nothing under them
(tables of contents) are dropped, and a 10-K's item named several times keeps the one with a body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["MAX_TITLE_CHARS", "Section", "detect_sections", "sections_from_heads"]

MAX_TITLE_CHARS = 120

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
class Section:
    """A titled stretch of a document's text, as character offsets (``end`` is one past its last character)."""

    title: str
    start: int
    end: int


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
    if len(line) > MAX_TITLE_CHARS:
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

    The next line is the start of the title. PDF text extraction can break titles mid-word into fragments
    separated by blank lines ("Busines" / "" / "s."), so such fragments are glued on without a space (unless
    they start with one). Stops at a title that ends with a period, a long line, a line that follows without a
    blank line (the body), or another heading.
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


def detect_sections(text: str, *, markdown: bool = False) -> tuple[Section, ...]:
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
        elif markdown or len(line) > MAX_TITLE_CHARS:
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
        if len(title) > MAX_TITLE_CHARS:
            title = title[: MAX_TITLE_CHARS - 1] + "…"
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


def sections_from_heads(heads: list[tuple[str, int]], length: int) -> tuple[Section, ...]:
    """Sections from (title, start) pairs in text order; each ends where the next begins."""
    return tuple(
        Section(" ".join(title.split())[:MAX_TITLE_CHARS], start, heads[k + 1][1] if k + 1 < len(heads) else length)
        for k, (title, start) in enumerate(heads)
    )
