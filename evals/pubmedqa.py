"""PubMedQA (pubmedqa/pubmedqa), the expert-labelled part: yes/no/maybe questions over PubMed abstracts.

Layout: ``data/ori_pqal.json`` (an object keyed by PMID: ``QUESTION``, ``CONTEXTS`` (the abstract's paragraphs),
``LABELS`` (their headings), ``final_decision``) and ``data/test_ground_truth.json`` (``{PMID: label}`` for
the 500 test questions). ``split="test"`` (the default, the official test set), ``split="dev"`` (the other 500:
choose a rule on these, report it on the test set) or ``split="all"`` (1,000).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minions.documents import Document

from .errors import DatasetLayoutError
from .items import Dataset, EvalItem, eager, locate_file, read_json, require_fields, warn_skipped

__all__ = ["PUBMEDQA_SPLITS", "load_pubmedqa"]

QUESTIONS = ("ori_pqal.json", "data/ori_pqal.json")
GROUND_TRUTH = "test_ground_truth.json"
PUBMEDQA_SPLITS = ("test", "dev", "all")
FIELDS = ("QUESTION", "CONTEXTS", "final_decision")


def _abstract(record: Mapping[str, Any]) -> str:
    labels = record.get("LABELS") or []
    paragraphs = []
    for i, text in enumerate(record["CONTEXTS"]):
        label = labels[i] if i < len(labels) and labels[i] else ""
        paragraphs.append(f"{label}: {text}" if label else str(text))
    return "\n\n".join(paragraphs)


def load_pubmedqa(path: str | Path, *, split: str = "test") -> Dataset:
    """PubMedQA items (metric ``yes_no_maybe``), in the order of the test ids (``test``) or of the file (``dev``,
    ``all``)."""
    if split not in PUBMEDQA_SPLITS:
        raise DatasetLayoutError(f"Unknown PubMedQA split {split!r}: use one of {', '.join(PUBMEDQA_SPLITS)}.")
    file = locate_file(path, QUESTIONS, "PubMedQA")
    data = read_json(file, "PubMedQA")
    if not isinstance(data, dict):
        raise DatasetLayoutError(f"{file} is not in the PubMedQA layout: expected an object keyed by PMID.")
    labels: dict[str, str] = {pmid: str(r.get("final_decision", "")) for pmid, r in data.items()}
    if split != "all":
        truth_file = file.parent / GROUND_TRUTH
        if not truth_file.is_file():
            raise DatasetLayoutError(
                f"The PubMedQA {split} split needs {GROUND_TRUTH} beside {file.name} in {file.parent}; "
                "or pass --dataset-option split=all.",
                path=str(file.parent),
            )
        truth = read_json(truth_file, "PubMedQA")
        if not isinstance(truth, dict):
            raise DatasetLayoutError(f"{truth_file} is not in the PubMedQA layout: expected {{PMID: label}}.")
        test = {str(k): str(v) for k, v in truth.items()}
        labels = test if split == "test" else {k: v for k, v in labels.items() if k not in test}
    items: list[EvalItem] = []
    skipped: dict[str, str] = {}
    for pmid, label in labels.items():
        record = data.get(pmid)
        if record is None:
            skipped[pmid] = f"not in {file.name}"
            continue
        require_fields(record, FIELDS, f"{file} PMID {pmid}", "PubMedQA")
        items.append(
            EvalItem(
                id=pmid,
                question=str(record["QUESTION"]),
                gold=(label.strip().lower(),),
                metric="yes_no_maybe",
                load=eager(Document.from_text(_abstract(record), name=f"pubmed_{pmid}.txt")),
                metadata={"year": record.get("YEAR")},
            )
        )
    warn_skipped("PubMedQA", skipped, len(items))
    return Dataset("pubmedqa", str(file), tuple(items), skipped, {"split": split})
