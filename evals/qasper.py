"""QASPER (allenai): questions over NLP papers, scored by Answer-F1 as in the official evaluator.

Layout: ``qasper-{train,dev,test}-v0.3.json``, an object keyed by paper id; each paper has ``title``,
``abstract``, ``full_text`` (sections: ``section_name`` and ``paragraphs``) and ``qas`` (``question``,
``question_id``, ``answers``: one per annotator, each ``{"answer": {"unanswerable", "extractive_spans",
"yes_no", "free_form_answer", ...}}``).

Each annotator's answer becomes one gold string, the way the official evaluator reads it: "Unanswerable",
the extractive spans joined by ", ", the free-form answer, or "Yes"/"No".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minions.documents import Document

from .errors import DatasetLayoutError
from .items import Dataset, EvalItem, eager, locate_file, read_json, require_fields, warn_skipped

__all__ = ["gold_answer", "load_qasper", "paper_text"]

CANDIDATES = ("qasper-test-v0.3.json", "qasper-dev-v0.3.json")
PAPER_FIELDS = ("title", "full_text", "qas")


def gold_answer(answer: Mapping[str, Any]) -> str | None:
    """One annotator's answer as a string, as the official QASPER evaluator reads it (None: no answer)."""
    if answer.get("unanswerable"):
        return "Unanswerable"
    spans = [s for s in answer.get("extractive_spans") or [] if s]
    if spans:
        return ", ".join(spans)
    free_form = (answer.get("free_form_answer") or "").strip()
    if free_form:
        return free_form
    yes_no = answer.get("yes_no")
    if yes_no is None:
        return None
    return "Yes" if yes_no else "No"


def paper_text(paper: Mapping[str, Any]) -> str:
    """The paper as Markdown: title, abstract, then each section's heading and non-empty paragraphs."""
    parts = [f"# {paper.get('title', '').strip()}"]
    if (paper.get("abstract") or "").strip():
        parts.append(f"## Abstract\n\n{paper['abstract'].strip()}")
    for section in paper.get("full_text") or []:
        paragraphs = [p.strip() for p in section.get("paragraphs") or [] if p and p.strip()]
        name = (section.get("section_name") or "").strip()
        if name or paragraphs:
            parts.append("\n\n".join([f"## {name}" if name else "", *paragraphs]).strip())
    return "\n\n".join(parts)


def load_qasper(path: str | Path) -> Dataset:
    """QASPER items (metric ``f1``): one per question; gold holds one answer per annotator."""
    file = locate_file(path, CANDIDATES, "QASPER")
    data = read_json(file, "QASPER")
    where = str(file)
    if not isinstance(data, dict):
        raise DatasetLayoutError(
            f"{where} is not in the QASPER layout: expected an object of papers "
            '{"<paper id>": {"title", "abstract", "full_text", "qas"}}.',
            path=where,
        )
    items: list[EvalItem] = []
    skipped: dict[str, str] = {}
    seen: dict[str, int] = {}
    for paper_id, paper in data.items():
        require_fields(paper, PAPER_FIELDS, f"{where} paper {paper_id}", "QASPER")
        document = Document.from_text(paper_text(paper), name=f"{paper_id}.md")
        for qa in paper["qas"]:
            require_fields(qa, ("question", "answers"), f"{where} paper {paper_id}", "QASPER")
            # question ids repeat in some copies (the sample file reuses one): keep every question, uniquely named
            base = str(qa.get("question_id") or f"{paper_id}/q{len(items) + 1}")
            seen[base] = seen.get(base, 0) + 1
            item_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
            golds = [g for a in qa["answers"] if (g := gold_answer(a.get("answer", {}))) is not None]
            if not golds:
                skipped[item_id] = "no annotator gave an answer"
                continue
            items.append(
                EvalItem(
                    id=item_id,
                    question=str(qa["question"]),
                    gold=tuple(golds),
                    metric="f1",
                    load=eager(document),
                    metadata={"paper": paper_id},
                )
            )
    warn_skipped("QASPER", skipped, len(items))
    return Dataset("qasper", where, tuple(items), skipped)
