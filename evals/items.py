"""What every benchmark loader yields: ``EvalItem``s (a question, its documents, gold answers and how to score
them), gathered in a ``Dataset`` that also says which questions were skipped and why."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from minions.documents import Document
from minions.protocols.choices import LETTERS, YES_NO_MAYBE, Choices

from .errors import DatasetLayoutError
from .gold import EvidenceSet, GoldEvidence

__all__ = [
    "HALVES",
    "LETTERS",
    "METRICS",
    "Dataset",
    "EvalItem",
    "Metric",
    "eager",
    "half",
    "locate_file",
    "read_json",
    "read_jsonl",
    "require_fields",
    "warn_skipped",
]

log = logging.getLogger(__name__)

Metric = Literal["numeric", "f1", "choice", "yes_no_maybe"]
METRICS: tuple[Metric, ...] = ("numeric", "f1", "choice", "yes_no_maybe")
"""numeric: numbers match within tolerance (FinanceBench); f1: SQuAD token F1 (QASPER, L-Eval); choice: the
option letter (LongHealth, BAMBOO); yes_no_maybe: the label (PubMedQA)."""

DocumentLoader = Callable[[], Sequence[Document]]


HALVES = ("A", "B")
"""The two fixed halves of a set (``half``): tune on one, report the other."""


def half(item_id: str) -> str:
    """The half an item belongs to, fixed by its id alone: "A" where the first byte of the SHA-256 of the id (UTF-8)
    is even, else "B" (FinanceBench's 129 questions with a filing here: 67 in A, 62 in B)."""
    return HALVES[hashlib.sha256(item_id.encode("utf-8")).digest()[0] % 2]


def eager(*documents: Document) -> DocumentLoader:
    """A loader for documents already in memory."""
    return lambda: documents


@dataclass(frozen=True)
class EvalItem:
    """One question. ``load`` returns its documents (lazily: a filing's PDF is read when the item runs)."""

    id: str
    question: str
    gold: tuple[str, ...]
    """Accepted answers; for ``choice`` the correct option's letter, for ``yes_no_maybe`` the label."""
    metric: Metric
    load: DocumentLoader = field(repr=False, compare=False)
    options: tuple[str, ...] = ()
    """Option texts of a multiple-choice question, in letter order (without their "A." prefixes)."""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)
    evidence: tuple[EvidenceSet, ...] = field(default=(), repr=False, compare=False)
    """Where the answer lies, as the benchmark marks it: one set of places per annotator (QASPER has several,
    and a set may be empty: an unanswerable question), else one set; empty where the benchmark marks none."""
    paragraphs: tuple[GoldEvidence, ...] = field(default=(), repr=False, compare=False)
    """The documents' paragraphs, where the benchmark scores evidence by paragraph (QASPER's evidence F1)."""

    def documents(self) -> list[Document]:
        return list(self.load())

    @property
    def choices(self) -> Choices | None:
        """The answers the question allows, as the loader knows them: its options (``choice``), or yes, no and
        maybe (``yes_no_maybe``); None for an open question."""
        if self.metric == "choice" and self.options:
            return Choices(self.options)
        return YES_NO_MAYBE if self.metric == "yes_no_maybe" else None

    @property
    def task(self) -> str:
        """The question as a protocol is asked it: options listed, and the form the answer must take."""
        return self.choices.ask(self.question) if self.choices is not None else self.question


@dataclass(frozen=True)
class Dataset:
    """A loaded benchmark: its items in file order, and the questions skipped (id -> reason)."""

    name: str
    path: str
    items: tuple[EvalItem, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    library: tuple[str, ...] = ()
    """Folders of every document a library of the set holds, where that is more than its questions' documents
    (``evals.folder``); empty: the questions' documents."""

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[EvalItem]:
        return iter(self.items)


def locate_file(path: str | Path, candidates: Sequence[str], dataset: str) -> Path:
    """``path`` itself when it is a file, else the first of ``candidates`` (relative paths) found under it.

    Raises DatasetLayoutError naming the expected files.
    """
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        for name in candidates:
            if (p / name).is_file():
                return p / name
        raise DatasetLayoutError(
            f"{p} does not have the {dataset} layout: expected {' or '.join(candidates)} in it "
            f"(or pass the file itself).",
            path=str(p),
        )
    raise DatasetLayoutError(f"No such file or directory: {p}: point --data at your {dataset} download.", path=str(p))


def read_json(path: Path, dataset: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetLayoutError(f"Cannot read {path} as {dataset} JSON ({exc}).", path=str(path)) from exc


def read_jsonl(path: Path, dataset: str) -> tuple[list[tuple[int, dict[str, Any]]], list[int]]:
    """(1-based line number, record) for every JSON object line, and the numbers of malformed lines, which are
    logged and skipped, never fatal (some benchmarks ship one or two)."""
    records: list[tuple[int, dict[str, Any]]] = []
    bad: list[int] = []
    try:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    log.warning("%s: %s line %d is not valid JSON (%s); skipped", dataset, path.name, number, exc)
                    bad.append(number)
                    continue
                if isinstance(record, dict):
                    records.append((number, record))
                else:
                    bad.append(number)
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetLayoutError(f"Cannot read {path} ({exc}).", path=str(path)) from exc
    return records, bad


def warn_skipped(dataset: str, skipped: Mapping[str, str], kept: int) -> None:
    """Log how many questions a loader skipped, and why (the first few)."""
    if skipped:
        shown = "; ".join(f"{k}: {v}" for k, v in list(skipped.items())[:5])
        more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        log.warning("%s: skipped %d of %d questions (%s%s)", dataset, len(skipped), len(skipped) + kept, shown, more)


def require_fields(record: Mapping[str, Any], names: Sequence[str], where: str, dataset: str) -> None:
    missing = [n for n in names if n not in record]
    if missing:
        raise DatasetLayoutError(
            f"{where} is not in the {dataset} layout: it lacks {', '.join(missing)} "
            f"(expected fields: {', '.join(names)}).",
            path=where,
        )
