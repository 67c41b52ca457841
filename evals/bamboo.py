"""BAMBOO (RUCAIBox/BAMBOO) PaperQA: multiple-choice questions over full papers.

Layout: ``datasets/paperqa_{4k,16k}.jsonl``; each line has ``question``, ``options`` (``["A. ...", "B. ...",
...]``), ``answer`` (the letter), ``content`` (the paper) and ``evidence``. The published files have one or
two lines that are not valid JSON: they are skipped with a warning, never fatal.
"""

from __future__ import annotations

import re
from pathlib import Path

from minions.documents import Document

from .items import LETTERS, Dataset, EvalItem, eager, locate_file, read_jsonl, require_fields, warn_skipped

__all__ = ["load_bamboo_paperqa"]

CANDIDATES = ("paperqa_16k.jsonl", "datasets/paperqa_16k.jsonl", "paperqa_4k.jsonl", "datasets/paperqa_4k.jsonl")
FIELDS = ("question", "options", "answer", "content")
_OPTION_PREFIX = re.compile(r"\s*\(?([A-J])\s*[.):]\s*")


def _option_text(option: str, index: int) -> str:
    """``"B. ChemProt, RCT"`` -> ``"ChemProt, RCT"`` (only when the prefix is this option's own letter)."""
    m = _OPTION_PREFIX.match(option)
    if m and m.group(1) == LETTERS[index]:
        return option[m.end() :].strip()
    return option.strip()


def load_bamboo_paperqa(path: str | Path) -> Dataset:
    """BAMBOO PaperQA items (metric ``choice``); ids are ``<file stem>:<line number>``."""
    file = locate_file(path, CANDIDATES, "BAMBOO PaperQA")
    records, bad = read_jsonl(file, "BAMBOO PaperQA")
    skipped = {f"{file.stem}:{n}": "malformed JSON line" for n in bad}
    items: list[EvalItem] = []
    for number, record in records:
        require_fields(record, FIELDS, f"{file} line {number}", "BAMBOO PaperQA")
        item_id = f"{file.stem}:{number}"
        if not str(record["content"]).strip():
            skipped[item_id] = "its paper has no text"
            continue
        options = tuple(_option_text(str(o), i) for i, o in enumerate(record["options"][: len(LETTERS)]))
        answer = str(record["answer"]).strip().strip("().").upper()
        if answer not in LETTERS[: len(options)]:
            skipped[item_id] = f"its answer {record['answer']!r} is not one of its option letters"
            continue
        items.append(
            EvalItem(
                id=item_id,
                question=str(record["question"]),
                gold=(answer,),
                metric="choice",
                load=eager(Document.from_text(str(record["content"]), name=f"paper_{number}.txt")),
                options=options,
                metadata={"line": number},
            )
        )
    warn_skipped("BAMBOO PaperQA", skipped, len(items))
    return Dataset("bamboo-paperqa", str(file), tuple(items), skipped)
