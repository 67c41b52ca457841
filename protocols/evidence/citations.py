"""From job records to what is passed on: each citation checked against its chunk and placed (``aggregate``), the
evidence shown, a quote or its chunk (``evidence``), and the compact digest the remote model reads (empty answers
dropped, findings grouped by instruction, each with its source and its checked citation)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from typing import Any

from minions.chunking import Chunk
from minions.documents import Document

from ..parsing import normalize
from ..result import Citation, Evidence, JobRecord

__all__ = [
    "Finding",
    "aggregate",
    "best_answer",
    "chunk_evidence",
    "digest",
    "evidence",
    "find_quote",
    "finding_evidence",
    "locate",
    "place",
    "verify_citation",
]

MIN_QUOTE_CHARS = 8
NEAR_VERBATIM = 0.9
"""A citation counts when this share of it matches one stretch of the chunk (normalized)."""
CLIP = 240


@dataclass(frozen=True)
class Finding:
    id: int
    instruction: str
    answer: str
    explanation: str
    source: str
    citation: Citation | None
    job_id: int


def verify_citation(quote: str, text: str) -> bool:
    """Whether ``quote`` is (near-)verbatim in ``text``, ignoring case and whitespace: a few typos pass,
    a paraphrase does not."""
    q, t = normalize(quote).strip("\"' "), normalize(text)
    if len(q) < MIN_QUOTE_CHARS:
        return bool(q) and q in t
    if q in t:
        return True
    # Anchor on the longest exact stretch, then count what matches in the window of text around it,
    # in blocks of 3+ characters (so that scattered single letters do not add up).
    anchor = SequenceMatcher(None, t, q, autojunk=False).find_longest_match(0, len(t), 0, len(q))
    lo = max(anchor.a - anchor.b - 8, 0)
    window = t[lo : lo + len(q) + 16]
    blocks = SequenceMatcher(None, window, q, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks if b.size >= 3) >= NEAR_VERBATIM * len(q)


def find_quote(quote: str, text: str) -> tuple[int, int] | None:
    """Where ``quote`` starts and ends in ``text``, ignoring case and how whitespace runs; None if it is not
    there verbatim."""
    words = quote.split()
    if not words:
        return None
    m = re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE).search(text)
    return (m.start(), m.end()) if m else None


def locate(quote: str, chunk: Chunk, doc: Document | None) -> Citation:
    """A citation for ``quote`` with its provenance: the page where it starts, or its line in a document
    without pages (when it can be found; else the chunk's pages)."""
    quote = quote.strip()
    whole = find_quote(quote, chunk.text)
    found = whole or find_quote(quote[:60], chunk.text)
    start = chunk.start + found[0] if found else None
    end = chunk.start + whole[1] if whole else None
    pages, line = tuple(chunk.pages), None
    if start is not None and doc is not None:
        if doc.pages:
            page = doc.page_of(start)
            pages = (page,) if page is not None else pages
        else:
            line = doc.text.count("\n", 0, start) + 1
    return Citation(
        text=quote,
        document=chunk.document,
        chunk=chunk.index,
        pages=pages,
        start=start,
        end=end if end is not None else (start + len(quote) if start is not None else None),
        line=line,
    )


def place(citation: Citation) -> str:
    """Where ``citation`` is, as an answer says it: "report.pdf, page 4", "notes.md, line 27"."""
    return citation.label.replace(f"{citation.document} ", f"{citation.document}, ", 1)


def aggregate(
    records: Sequence[JobRecord], chunks: Mapping[int, Chunk], docs: Mapping[str, Document]
) -> tuple[list[JobRecord], list[Finding]]:
    """Check every citation against its chunk and keep the jobs that answered. Returns the records with
    ``citation_verified`` set and the findings (unverified citations are dropped from findings)."""
    checked: list[JobRecord] = []
    findings: list[Finding] = []
    for r in records:
        chunk = chunks[r.job_id]
        verified = verify_citation(r.citation, chunk.text) if r.citation else None
        r = replace(r, citation_verified=verified)
        checked.append(r)
        if not r.ok or not r.answer:
            continue
        citation = locate(r.citation, chunk, docs.get(chunk.document)) if r.citation and verified else None
        findings.append(
            Finding(len(findings) + 1, r.instruction, r.answer, r.explanation, chunk.label, citation, r.job_id)
        )
    return checked, findings


def chunk_evidence(chunk: Chunk, *, kind: str = "chunk", score: float | None = None) -> Evidence:
    return Evidence(chunk.document, chunk.text, chunk.start, chunk.end, tuple(chunk.pages), kind, score)


def finding_evidence(finding: Finding | None, chunk: Chunk, score: float | None = None) -> Evidence:
    """What is shown of a job over ``chunk``: its quote, with its place, when it found one; else the chunk."""
    c = finding.citation if finding is not None else None
    if c is None:
        return chunk_evidence(chunk, score=score)
    return Evidence(c.document, c.text, c.start, c.end, c.pages, "quote", score)


def evidence(read: Sequence[tuple[Chunk, float | None, int]], findings: Sequence[Finding]) -> list[Evidence]:
    """What is passed on, best first: for each read chunk (its chunk, its rank's score and its job's id), its job's
    quote when it found one, else the chunk."""
    by_job = {f.job_id: f for f in findings}
    return [finding_evidence(by_job.get(job_id), chunk, score) for chunk, score, job_id in read]


def _clip(text: str) -> str:
    return text if len(text) <= CLIP else text[: CLIP - 1] + "…"


def digest(findings: Sequence[Finding], max_per_instruction: int = 24) -> list[dict[str, Any]]:
    """Findings grouped by instruction, clipped: what the remote model reads instead of the chunks."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        items = groups.setdefault(f.instruction, [])
        if len(items) < max_per_instruction:
            item: dict[str, Any] = {"id": f.id, "source": f.source}
            if f.citation is None or f.answer != f.citation.text:
                item["answer"] = _clip(f.answer)
            if f.explanation:
                item["explanation"] = _clip(f.explanation)
            if f.citation is not None:
                item["quote"] = _clip(f.citation.text)
            items.append(item)
    return [{"instruction": i, "findings": items} for i, items in groups.items()]


def best_answer(findings: Sequence[Finding]) -> str:
    """The answer most jobs agree on (a fallback when the remote model cannot give one)."""
    if not findings:
        return ""
    counts = Counter(normalize(f.answer) for f in findings)
    top = counts.most_common(1)[0][0]
    return next(f.answer for f in findings if normalize(f.answer) == top)
