"""Which chunks each planned job runs over, and the bound on how many jobs a round may run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from minions.chunking import Chunk
from minions.documents import Document

from .schemas import JobSpec, Plan
from .search.ranking import lexical_rank

__all__ = ["ScopedJob", "bound_jobs", "check_plan", "chunks_in_scope"]


@dataclass(frozen=True)
class ScopedJob:
    instruction: str
    chunks: tuple[Chunk, ...]
    retrieved: bool = False


def _section_matches(wanted: str, title: str) -> bool:
    w, t = wanted.strip().lower(), title.strip().lower()
    return bool(w) and (w == t or w in t or t in w)


def _check_spec(spec: JobSpec, docs: Mapping[str, Document]) -> list[str]:
    problems = [
        f"unknown document {name!r} (documents: {', '.join(docs)})" for name in spec.documents if name not in docs
    ]
    targets = [docs[n] for n in spec.documents if n in docs] or list(docs.values())
    if spec.scope == "pages":
        last = max((d.pages[-1].number for d in targets if d.pages), default=0)
        if not last:
            problems.append("these documents have no pages: use scope 'all', 'sections' or 'retrieve'")
        problems += [f"pages {r} are past the last page ({last})" for r in spec.pages if last and r[0] > last]
    if spec.scope == "sections":
        titles = [s.title for d in targets for s in d.sections]
        for wanted in spec.sections:
            if not any(_section_matches(wanted, t) for t in titles):
                known = ", ".join(repr(t) for t in titles[:20]) or "none"
                problems.append(f"no section {wanted!r} (sections: {known})")
    return problems


def check_plan(plan: Plan | Sequence[JobSpec], docs: Mapping[str, Document]) -> None:
    """Raise ValueError (sent back to the planner) when a job names documents, pages or sections that do not
    exist."""
    specs = plan.jobs if isinstance(plan, Plan) else plan
    problems = [f"job {i + 1}: {p}" for i, spec in enumerate(specs) for p in _check_spec(spec, docs)]
    if problems:
        raise ValueError("; ".join(problems))


def _overlaps(chunk: Chunk, spans: Sequence[tuple[int, int]]) -> bool:
    return any(chunk.start < end and start < chunk.end for start, end in spans)


def chunks_in_scope(
    spec: JobSpec, chunks: Mapping[str, Sequence[Chunk]], docs: Mapping[str, Document], top_k: int
) -> list[Chunk]:
    """The chunks ``spec`` asks for (for 'retrieve': the ``top_k`` best by BM25)."""
    names = spec.documents or list(chunks)
    pool = [c for name in names for c in chunks.get(name, ())]
    if spec.scope == "pages":
        ranges = [(lo, hi) for lo, hi in spec.pages]
        pool = [
            c
            for c in pool
            if _overlaps(
                c, [(p.start, p.end) for p in docs[c.document].pages if any(lo <= p.number <= hi for lo, hi in ranges)]
            )
        ]
    elif spec.scope == "sections":
        pool = [
            c
            for c in pool
            if _overlaps(
                c,
                [
                    (s.start, s.end)
                    for s in docs[c.document].sections
                    if any(_section_matches(w, s.title) for w in spec.sections)
                ],
            )
        ]
    elif spec.scope == "retrieve":
        pool = retrieve(pool, spec.query or spec.instruction, top_k)
    return pool


def retrieve(chunks: Sequence[Chunk], query: str, k: int) -> list[Chunk]:
    """The ``k`` chunks that rank best for ``query`` (``protocols.search.ranking.lexical_rank``), best first."""
    return [r.chunk for r in lexical_rank(chunks, query)[:k]]


def bound_jobs(
    specs: Sequence[JobSpec], scoped: Sequence[list[Chunk]], samples: int, max_jobs: int
) -> tuple[list[ScopedJob], list[str]]:
    """Fit the round into ``max_jobs`` jobs: a scope with more chunks than its share falls back to BM25
    retrieval of its best chunks for the instruction. Returns the jobs and a notice for each fallback."""
    share = max(1, max_jobs // max(1, samples * len(specs)))
    jobs, notices = [], []
    for spec, chunks in zip(specs, scoped, strict=True):
        if len(chunks) <= share:
            jobs.append(ScopedJob(spec.instruction, tuple(chunks)))
            continue
        best = retrieve(chunks, f"{spec.query or ''} {spec.instruction}", share)
        jobs.append(ScopedJob(spec.instruction, tuple(best), retrieved=True))
        notices.append(
            f"Scope of {spec.instruction[:60]!r} spans {len(chunks)} chunks; over the bound of "
            f"{max_jobs} jobs per round, so it runs on the {len(best)} chunks BM25 ranks best."
        )
    return jobs, notices
