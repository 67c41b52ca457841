"""L-Eval (OpenLMLab/LEval) open-ended tasks: ``scientific_qa`` (full QASPER papers) and ``financial_qa``
(earnings-call transcripts), both scored by token F1 as L-Eval does.

Layout: ``LEval-data/Open-ended-tasks/<task>.jsonl``; each line is one document: ``input`` (its text),
``instructions`` (questions) and ``outputs`` (one reference answer per question). L-Eval marks no evidence.

``questions``: a JSONL file of questions of one's own over the task's documents, asked instead of L-Eval's, each
``{"id", "document": the line of the task's file (1-based), "question", "answer", "evidence": [quotes]}``; each
quote is placed in the document's text (``gold.Locator``) as the question's gold evidence.
"""

from __future__ import annotations

import logging
from pathlib import Path

from minions.documents import Document

from .errors import DatasetLayoutError
from .gold import GoldEvidence, Locator, one_annotator
from .items import Dataset, EvalItem, eager, locate_file, read_jsonl, require_fields

__all__ = ["LEVAL_TASKS", "load_leval"]

log = logging.getLogger(__name__)

LEVAL_TASKS = ("scientific_qa", "financial_qa")
FIELDS = ("input", "instructions", "outputs")


def load_leval(path: str | Path, *, task: str, questions: str | None = None) -> Dataset:
    """Items (metric ``f1``) of one L-Eval task: one per instruction of every document (``questions``: one per
    line of that file instead, the module's docstring)."""
    if task not in LEVAL_TASKS:
        raise DatasetLayoutError(f"Unknown L-Eval task {task!r}: use one of {', '.join(LEVAL_TASKS)}.")
    file = locate_file(path, (f"{task}.jsonl", f"LEval-data/Open-ended-tasks/{task}.jsonl"), f"L-Eval {task}")
    records, bad = read_jsonl(file, f"L-Eval {task}")
    items: list[EvalItem] = []
    skipped = {f"{task}:{n}": "malformed JSON line" for n in bad}
    documents: dict[int, Document] = {}
    for number, record in records:
        require_fields(record, FIELDS, f"{file} line {number}", f"L-Eval {task}")
        instructions, outputs = record["instructions"], record["outputs"]
        if not str(record["input"]).strip():
            skipped[f"{task}:{number}"] = "its document has no text"
            continue
        if len(instructions) != len(outputs):
            log.warning(
                "L-Eval %s line %d: %d instructions but %d outputs; unpaired ones skipped",
                task,
                number,
                len(instructions),
                len(outputs),
            )
        document = documents[number] = Document.from_text(str(record["input"]), name=f"{task}_{number}.txt")
        if questions is not None:
            continue
        for k, (question, output) in enumerate(zip(instructions, outputs, strict=False)):
            gold = tuple(str(o) for o in output) if isinstance(output, list) else (str(output),)
            items.append(
                EvalItem(
                    id=f"{task}:{number}:{k}",
                    question=str(question),
                    gold=gold,
                    metric="f1",
                    load=eager(document),
                    metadata={"line": number, "source": record.get("source")},
                )
            )
    if questions is not None:
        items = _own_questions(Path(questions).expanduser(), documents, task)
    dataset = "leval-scientific" if task == "scientific_qa" else "leval-financial"
    options = {"task": task} | ({"questions": questions} if questions is not None else {})
    return Dataset(dataset, str(file), tuple(items), skipped, options)


def _own_questions(file: Path, documents: dict[int, Document], task: str) -> list[EvalItem]:
    """The items of a file of one's own questions over ``documents`` (by line), each with its evidence placed."""
    if not file.is_file():
        raise DatasetLayoutError(f"No questions file at {file}: name a JSONL file (see minions.evals.leval).")
    records, _bad = read_jsonl(file, f"L-Eval {task} questions")
    items = []
    for number, record in records:
        where = f"{file} line {number}"
        require_fields(record, ("document", "question", "answer"), where, f"L-Eval {task} questions")
        document = documents.get(int(record["document"]))
        if document is None:
            raise DatasetLayoutError(f"{where}: the task's file has no document on line {record['document']}.")
        locator, places = Locator(document.text), []
        for quote in record.get("evidence") or []:
            found = locator.find(str(quote))
            start, end = found if found is not None else (None, None)
            places.append(GoldEvidence(document.name, text=str(quote), start=start, end=end))
        items.append(
            EvalItem(
                id=str(record.get("id") or f"{task}:own:{number}"),
                question=str(record["question"]),
                gold=(str(record["answer"]),),
                metric="f1",
                load=eager(document),
                evidence=one_annotator(tuple(places)),
                metadata={"line": int(record["document"]), "kind": record.get("kind")},
            )
        )
    return items
