"""L-Eval (OpenLMLab/LEval) open-ended tasks: ``scientific_qa`` (full QASPER papers) and ``financial_qa``
(earnings-call transcripts), both scored by token F1 as L-Eval does.

Layout: ``LEval-data/Open-ended-tasks/<task>.jsonl``; each line is one document: ``input`` (its text),
``instructions`` (questions) and ``outputs`` (one reference answer per question).
"""

from __future__ import annotations

import logging
from pathlib import Path

from minions.documents import Document

from .errors import DatasetLayoutError
from .items import Dataset, EvalItem, eager, locate_file, read_jsonl, require_fields

__all__ = ["LEVAL_TASKS", "load_leval"]

log = logging.getLogger(__name__)

LEVAL_TASKS = ("scientific_qa", "financial_qa")
FIELDS = ("input", "instructions", "outputs")


def load_leval(path: str | Path, *, task: str) -> Dataset:
    """Items (metric ``f1``) of one L-Eval task: one per instruction of every document."""
    if task not in LEVAL_TASKS:
        raise DatasetLayoutError(f"Unknown L-Eval task {task!r}: use one of {', '.join(LEVAL_TASKS)}.")
    file = locate_file(path, (f"{task}.jsonl", f"LEval-data/Open-ended-tasks/{task}.jsonl"), f"L-Eval {task}")
    records, bad = read_jsonl(file, f"L-Eval {task}")
    items: list[EvalItem] = []
    skipped = {f"{task}:{n}": "malformed JSON line" for n in bad}
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
        document = Document.from_text(str(record["input"]), name=f"{task}_{number}.txt")
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
    dataset = "leval-scientific" if task == "scientific_qa" else "leval-financial"
    return Dataset(dataset, str(file), tuple(items), skipped, {"task": task})
