"""LongHealth (kbressem/LongHealth): five-option questions over fictional patients' clinical letters.

Layout: ``data/benchmark_v5.json``, an object keyed by patient id; each patient has ``name``, ``birthday``,
``diagnosis``, ``texts`` (letters keyed ``text_0``, ``text_1``, ...) and ``questions`` (``question``,
``answer_a`` ... ``answer_e``, ``correct`` holding the correct option's text, ``answer_location``).

The Minions paper's setting makes the context harder than one patient's file: ``pad_with_others=N`` adds the
letters of N other patients, chosen and shuffled in with a generator seeded by the patient id, so that every
run (and every protocol) sees the same context for the same question.

Gold evidence: ``answer_location`` (``{"text_3": {"start": [0.41], "end": [0.47]}}``) places the answer in the
named letters as fractions of each letter's length, as LongHealth's own code reads them
(``text[int(start * len(text)):int(end * len(text))]``); each (letter, start, end) becomes one place, a
character span of that letter's document. Locations outside [0, 1], or in letters that are empty, are dropped
with a warning.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from minions.documents import Document

from .errors import DatasetLayoutError
from .gold import EvidenceSet, GoldEvidence, one_annotator
from .items import LETTERS, Dataset, EvalItem, eager, locate_file, read_json, require_fields, warn_skipped

__all__ = ["load_longhealth"]

log = logging.getLogger(__name__)

CANDIDATES = ("benchmark_v5.json", "data/benchmark_v5.json")
_OPTION_KEY = re.compile(r"answer_([a-z])")


def _options(question: Mapping[str, Any]) -> list[str]:
    keys = sorted(k for k in question if _OPTION_KEY.fullmatch(k))
    return [str(question[k]).strip() for k in keys]


def _correct_letter(question: Mapping[str, Any], options: Sequence[str]) -> str | None:
    """The letter of the correct option: ``correct`` holds its text (or, in some copies, its key or letter)."""
    correct = str(question.get("correct", "")).strip()
    for i, text in enumerate(options):
        if correct == text:
            return LETTERS[i]
    key = _OPTION_KEY.fullmatch(correct.lower())
    letter = key.group(1).upper() if key else correct.upper()
    return letter if len(letter) == 1 and letter in LETTERS[: len(options)] else None


Letters = dict[str, list[tuple[str, str]]]
"""Each patient's non-empty letters, in order: (key in ``texts``, text)."""


def _letters(patient_id: str, patient: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    texts = patient.get("texts")
    if not isinstance(texts, Mapping) or not texts:
        raise DatasetLayoutError(f"{where}: patient {patient_id} has no texts {{text_0: ...}}.", path=where)
    return [(k, str(texts[k])) for k in sorted(texts, key=lambda k: (len(k), k)) if str(texts[k]).strip()]


def _context(patient_id: str, letters: Letters, pad_with_others: int) -> tuple[tuple[Document, ...], dict[str, str]]:
    """The patient's letters, with ``pad_with_others`` other patients' letters shuffled in, and the document
    name of each of the patient's own letters (by key)."""
    rng = random.Random(f"longhealth:{patient_id}")
    others = [p for p in letters if p != patient_id]
    chosen = rng.sample(others, min(pad_with_others, len(others)))
    texts = [(p, key, text) for p in [patient_id, *chosen] for key, text in letters[p]]
    if chosen:
        rng.shuffle(texts)
    names = [f"letter_{k + 1:02d}.txt" for k in range(len(texts))]
    own = {key: name for (p, key, _), name in zip(texts, names, strict=True) if p == patient_id}
    return tuple(Document.from_text(t, name=n) for (_, _, t), n in zip(texts, names, strict=True)), own


def _spans(location: Any) -> Iterator[tuple[str, float, float]]:
    """(letter key, start, end) of every span an ``answer_location`` lists; entries that are not numbers are
    skipped."""
    if not isinstance(location, Mapping):
        return
    for key, spans in location.items():
        if not isinstance(spans, Mapping):
            continue
        for start, end in zip(spans.get("start") or [], spans.get("end") or [], strict=False):
            if isinstance(start, int | float) and isinstance(end, int | float):
                yield str(key), float(start), float(end)


def _located(location: Any, texts: Mapping[str, str], names: Mapping[str, str], item_id: str) -> EvidenceSet:
    """The places ``answer_location`` names, as character spans of the patient's letters."""
    places: list[GoldEvidence] = []
    for key, start, end in _spans(location):
        if key not in names or not 0 <= start <= end <= 1:
            log.warning(
                "LongHealth %s: answer_location %s %g-%g is not a place in a letter; dropped", item_id, key, start, end
            )
            continue
        text = texts[key]
        a, b = int(start * len(text)), int(end * len(text))
        places.append(GoldEvidence(names[key], text[a:b], a, b))
    return tuple(places)


def load_longhealth(path: str | Path, *, pad_with_others: int = 0) -> Dataset:
    """LongHealth items (metric ``choice``), one per question; ``pad_with_others``: other patients' letters
    added to each question's context."""
    if pad_with_others < 0:
        raise DatasetLayoutError(f"pad_with_others must be 0 or more, got {pad_with_others}.")
    file = locate_file(path, CANDIDATES, "LongHealth")
    data = read_json(file, "LongHealth")
    where = str(file)
    if not isinstance(data, dict) or not data:
        raise DatasetLayoutError(
            f"{where} is not in the LongHealth layout: expected an object of patients "
            '{"patient_01": {"texts": {...}, "questions": [...]}, ...}.',
            path=where,
        )
    letters = {pid: _letters(pid, p, where) for pid, p in data.items() if isinstance(p, dict)}
    items: list[EvalItem] = []
    skipped: dict[str, str] = {}
    for patient_id, patient in data.items():
        require_fields(patient, ("texts", "questions"), f"{where} patient {patient_id}", "LongHealth")
        context, names = _context(patient_id, letters, pad_with_others)
        texts = dict(letters[patient_id])
        for n, question in enumerate(patient["questions"], start=1):
            item_id = f"{patient_id}/q{question.get('No', n)}"
            require_fields(question, ("question", "correct"), f"{where} {item_id}", "LongHealth")
            options = _options(question)
            letter = _correct_letter(question, options)
            if len(options) < 2 or letter is None:
                skipped[item_id] = "its correct answer is not one of its options"
                continue
            items.append(
                EvalItem(
                    id=item_id,
                    question=str(question["question"]),
                    gold=(letter,),
                    metric="choice",
                    load=eager(*context),
                    options=tuple(options),
                    metadata={"patient": patient_id, "documents": len(context)},
                    evidence=one_annotator(_located(question.get("answer_location"), texts, names, item_id)),
                )
            )
    warn_skipped("LongHealth", skipped, len(items))
    return Dataset("longhealth", where, tuple(items), skipped, {"pad_with_others": pad_with_others})
