"""QASPER (allenai): questions over NLP papers, scored by Answer-F1 as in the official evaluator.

Layout: ``qasper-{train,dev,test}-v0.3.json``, an object keyed by paper id; each paper has ``title``,
``abstract``, ``full_text`` (sections: ``section_name`` and ``paragraphs``) and ``qas`` (``question``,
``question_id``, ``answers``: one per annotator, each ``{"answer": {"unanswerable", "extractive_spans",
"yes_no", "free_form_answer", ...}}``).

Each annotator's answer becomes one gold string, the way the official evaluator reads it: "Unanswerable",
the extractive spans joined by ", ", the free-form answer, or "Yes"/"No".

Gold evidence: each annotator's ``evidence`` paragraphs, one set per annotator (the official evaluator takes
the max over annotators). Evidence in figures and tables ("FLOAT SELECTED: ...") has no text to find: it is
dropped, as the official evaluator's ``--text_evidence_only`` does, and an annotator left with none (or who
found the question unanswerable) keeps an empty set. The paper's paragraphs (abstract included) are kept as
``EvalItem.paragraphs``, the units of the evidence F1.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minions.documents import Document

from .errors import DatasetLayoutError
from .gold import EvidenceSet, GoldEvidence, Locator
from .items import Dataset, EvalItem, eager, locate_file, read_json, require_fields, warn_skipped

__all__ = ["gold_answer", "load_qasper", "paper_document", "paper_text"]

CANDIDATES = ("qasper-test-v0.3.json", "qasper-dev-v0.3.json")
PAPER_FIELDS = ("title", "full_text", "qas")
FLOAT_SELECTED = "FLOAT SELECTED"


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


def _blocks(paper: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """The paper as Markdown blocks, each marked whether it is a paragraph: title, abstract, then each
    section's heading and non-empty paragraphs."""
    blocks = [(f"# {paper.get('title', '').strip()}", False)]
    if (paper.get("abstract") or "").strip():
        blocks += [("## Abstract", False), (paper["abstract"].strip(), True)]
    for section in paper.get("full_text") or []:
        paragraphs = [p.strip() for p in section.get("paragraphs") or [] if p and p.strip()]
        name = (section.get("section_name") or "").strip()
        if name:
            blocks.append((f"## {name}", False))
        blocks += [(p, True) for p in paragraphs]
    return blocks


def paper_text(paper: Mapping[str, Any]) -> str:
    """The paper as Markdown: title, abstract, then each section's heading and non-empty paragraphs."""
    return "\n\n".join(text for text, _ in _blocks(paper))


def paper_document(paper_id: str, paper: Mapping[str, Any]) -> tuple[Document, tuple[GoldEvidence, ...]]:
    """The paper as a document, and its paragraphs (abstract included) with their places in its text."""
    name = f"{paper_id}.md"
    paragraphs: list[GoldEvidence] = []
    at = 0
    for text, is_paragraph in _blocks(paper):
        if is_paragraph:
            paragraphs.append(GoldEvidence(name, text, at, at + len(text)))
        at += len(text) + 2
    return Document.from_text(paper_text(paper), name=name), tuple(paragraphs)


def _evidence_set(
    answer: Mapping[str, Any], paragraphs: Mapping[str, GoldEvidence], locator: Locator, name: str
) -> EvidenceSet:
    """One annotator's text evidence: each paragraph placed in the paper (else found in its text, else kept as
    text alone). An unanswerable question has none, as in the official evaluator."""
    if answer.get("unanswerable"):
        return ()
    places: list[GoldEvidence] = []
    for quote in answer.get("evidence") or []:
        text = str(quote).strip()
        if not text or FLOAT_SELECTED in text:
            continue
        place = paragraphs.get(text) or GoldEvidence(name, text, *(locator.find(text) or (None, None)))
        if place not in places:
            places.append(place)
    return tuple(places)


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
        document, paragraphs = paper_document(paper_id, paper)
        by_text, locator = {p.text: p for p in paragraphs}, Locator(document.text)
        for qa in paper["qas"]:
            require_fields(qa, ("question", "answers"), f"{where} paper {paper_id}", "QASPER")
            # question ids repeat in some copies (the sample file reuses one): keep every question, uniquely named
            base = str(qa.get("question_id") or f"{paper_id}/q{len(items) + 1}")
            seen[base] = seen.get(base, 0) + 1
            item_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
            answers = [a.get("answer", {}) for a in qa["answers"]]
            answered = [(g, a) for a in answers if (g := gold_answer(a)) is not None]
            golds = [g for g, _ in answered]
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
                    evidence=tuple(_evidence_set(a, by_text, locator, document.name) for _, a in answered),
                    paragraphs=paragraphs,
                )
            )
    warn_skipped("QASPER", skipped, len(items))
    return Dataset("qasper", where, tuple(items), skipped)
