"""BAMBOO (RUCAIBox/BAMBOO) PaperQA: multiple-choice questions over full papers.

Layout: ``datasets/paperqa_{4k,16k}.jsonl``; each line has ``question``, ``options`` (``["A. ...", "B. ...",
...]``), ``answer`` (the letter), ``content`` (the paper) and ``evidence``. The published files have one or
two lines that are not valid JSON: they are skipped with a warning, never fatal.

Gold evidence: ``evidence`` holds sentences of the paper, several joined by spaces and lightly edited (spacing,
hyphenation); some come from the abstract, which ``content`` lacks. Each sentence of it becomes one place: its
span in the paper where it is found (ignoring case, spacing and punctuation), else its text alone when the paper
holds most of its wording (``MIN_PRESENT``); sentences the paper does not hold are dropped.
"""

from __future__ import annotations

import re
from pathlib import Path

from minions.documents import Document

from .gold import EvidenceSet, GoldEvidence, Locator, one_annotator, share_in
from .items import LETTERS, Dataset, EvalItem, eager, locate_file, read_jsonl, require_fields, warn_skipped

__all__ = ["load_bamboo_paperqa"]

CANDIDATES = ("paperqa_16k.jsonl", "datasets/paperqa_16k.jsonl", "paperqa_4k.jsonl", "datasets/paperqa_4k.jsonl")
FIELDS = ("question", "options", "answer", "content")
_OPTION_PREFIX = re.compile(r"\s*\(?([A-J])\s*[.):]\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])|\s{2,}")
MIN_SENTENCE_WORDS = 4
"""Shorter pieces of ``evidence`` (a heading, a stray "et al.") are joined to the sentence before them."""
MIN_PRESENT = 0.5
"""The share of an unplaced sentence's word trigrams the paper must hold for it to count as evidence."""


def _option_text(option: str, index: int) -> str:
    """``"B. ChemProt, RCT"`` -> ``"ChemProt, RCT"`` (only when the prefix is this option's own letter)."""
    m = _OPTION_PREFIX.match(option)
    if m and m.group(1) == LETTERS[index]:
        return option[m.end() :].strip()
    return option.strip()


def _sentences(evidence: str) -> list[str]:
    sentences: list[str] = []
    for piece in _SENTENCE_END.split(evidence.strip()):
        if sentences and len(piece.split()) < MIN_SENTENCE_WORDS:
            sentences[-1] = f"{sentences[-1]} {piece}"
        elif piece.strip():
            sentences.append(piece.strip())
    return sentences


def _evidence(evidence: str, paper: Document) -> EvidenceSet:
    """Each sentence of ``evidence`` that the paper holds, placed where it is found."""
    locator = Locator(paper.text)
    places = []
    for sentence in _sentences(evidence):
        span = locator.find(sentence)
        if span is not None or share_in(sentence, paper.text) >= MIN_PRESENT:
            places.append(GoldEvidence(paper.name, sentence, *(span or (None, None))))
    return tuple(places)


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
        paper = Document.from_text(str(record["content"]), name=f"paper_{number}.txt")
        items.append(
            EvalItem(
                id=item_id,
                question=str(record["question"]),
                gold=(answer,),
                metric="choice",
                load=eager(paper),
                options=options,
                metadata={"line": number},
                evidence=one_annotator(_evidence(str(record.get("evidence") or ""), paper)),
            )
        )
    warn_skipped("BAMBOO PaperQA", skipped, len(items))
    return Dataset("bamboo-paperqa", str(file), tuple(items), skipped)
