"""FinanceBench (patronus-ai/financebench): questions about public companies' filings (10-K, 10-Q, 8-K,
earnings releases), with numeric or short free-text answers.

Layout of a checkout: ``data/financebench_open_source.jsonl`` (one question a line: ``financebench_id``,
``doc_name``, ``question``, ``answer``, ``question_type``, ``question_reasoning``, ...) and ``pdfs/<doc_name>.pdf``.
Questions whose filing is not in ``pdfs/`` are skipped, with a warning that counts them.

Gold evidence: each question's ``evidence`` list (``evidence_text``, ``doc_name``, ``evidence_page_num``). The
page numbers are 0-based (the first page of the PDF is 0: the tests look each ``evidence_text`` up on the pages
``load_document`` extracts); they become 1-based ``Page.number``s here.

The Minions paper evaluates the numerical-reasoning questions: ``subset="numerical"`` keeps those whose
``question_reasoning`` mentions numerical reasoning (alone or with other reasoning, 67 of the 150 open-source
questions); ``subset="all"`` keeps every question.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from minions.documents import Document, load_document
from minions.errors import DocumentNotFoundError
from minions.paths import benchmark_data

from .errors import DatasetLayoutError
from .gold import GoldEvidence, one_annotator
from .items import Dataset, EvalItem, read_jsonl, require_fields

__all__ = ["FINANCEBENCH_SUBSETS", "filing_path", "find_filing", "load_financebench"]

log = logging.getLogger(__name__)

QUESTIONS = Path("data") / "financebench_open_source.jsonl"
PDFS = Path("pdfs")
FIELDS = ("financebench_id", "doc_name", "question", "answer")


def filing_path(root: str | os.PathLike[str], doc_name: str) -> Path:
    """Where a checkout keeps a filing: ``root/pdfs/<doc_name>.pdf`` (``doc_name`` with or without ``.pdf``)."""
    return Path(root) / PDFS / (doc_name if doc_name.lower().endswith(".pdf") else f"{doc_name}.pdf")


def find_filing(name: str | os.PathLike[str], data: str | os.PathLike[str] | None = None) -> Path:
    """The PDF a benchmark reads: ``name`` itself where that is a file, else ``name`` (a file name or a
    ``doc_name``) in ``data`` or in its ``pdfs/``: a FinanceBench checkout or its folder of PDFs (None:
    ``$MINIONS_DATA/financebench``; with neither, a ``ConfigError`` that says to pass ``--data``)."""
    given = Path(name).expanduser()
    if given.is_file():
        return given
    folder = benchmark_data("financebench", data, expected="a FinanceBench checkout with pdfs/, or the pdfs folder")
    in_checkout = filing_path(folder, str(name))
    candidates = [given, folder / in_checkout.name, in_checkout]
    for path in candidates[1:]:
        if path.is_file():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise DocumentNotFoundError(f"No PDF {name} (looked at {looked}): pass a path, or --data with the PDFs.")


def _numerical(record: dict[str, Any]) -> bool:
    return "numerical reasoning" in str(record.get("question_reasoning") or "").lower()


FINANCEBENCH_SUBSETS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "all": lambda record: True,
    "numerical": _numerical,
}

_PDF_CACHE_SIZE = 4
"""Filings kept in memory: questions about one filing are next to each other in the file."""


@lru_cache(maxsize=_PDF_CACHE_SIZE)
def _filing(path: str) -> Document:
    # load_document keeps the extracted text in its on-disk cache: a filing is extracted once, ever.
    return load_document(path)


def _loader(path: Path) -> Callable[[], Sequence[Document]]:
    return lambda: (_filing(str(path)),)


def _evidence(record: dict[str, Any]) -> tuple[GoldEvidence, ...]:
    """The question's evidence pages (1-based) and texts, in the filing each names."""
    places: list[GoldEvidence] = []
    for entry in record.get("evidence") or []:
        page = entry.get("evidence_page_num")
        doc_name = str(entry.get("doc_name") or record["doc_name"])
        place = GoldEvidence(
            document=f"{doc_name}.pdf",
            text=str(entry.get("evidence_text") or "").strip(),
            pages=(int(page) + 1,) if isinstance(page, int) and page >= 0 else (),
        )
        if (place.pages or place.text) and place not in places:
            places.append(place)
    return tuple(places)


def _root(path: str | Path, *, questions: bool = True) -> Path:
    """The checkout root, from the root itself or from its questions file (which it must hold if ``questions``)."""
    p = Path(path).expanduser()
    if p.is_file() and p.name == QUESTIONS.name:
        p = p.parent.parent
    if (questions and not (p / QUESTIONS).is_file()) or not (p / PDFS).is_dir():
        raise DatasetLayoutError(
            f"{p} does not have the FinanceBench layout: expected {QUESTIONS} and a {PDFS}/ folder of filings "
            "in it (a checkout of github.com/patronus-ai/financebench).",
            path=str(p),
        )
    return p


def load_financebench(path: str | Path, *, subset: str = "all", questions: str | None = None) -> Dataset:
    """FinanceBench items (metric ``numeric``); ``subset``: ``all`` or ``numerical``. ``questions``: a file of
    questions of one's own in FinanceBench's layout, asked instead of the checkout's, over its filings."""
    if subset not in FINANCEBENCH_SUBSETS:
        raise DatasetLayoutError(
            f"Unknown FinanceBench subset {subset!r}: use one of {', '.join(FINANCEBENCH_SUBSETS)}."
        )
    root = _root(path, questions=questions is None)
    keep = FINANCEBENCH_SUBSETS[subset]
    asked = Path(questions).expanduser() if questions is not None else root / QUESTIONS
    if not asked.is_file():
        raise DatasetLayoutError(
            f"No questions file at {asked}: name a JSONL file in FinanceBench's layout.", path=str(asked)
        )
    records, _bad = read_jsonl(asked, "FinanceBench")
    own = {"questions": str(asked)} if questions is not None else {}
    items: list[EvalItem] = []
    skipped: dict[str, str] = {}
    missing_filings: set[str] = set()
    for number, record in records:
        require_fields(record, FIELDS, f"{asked} line {number}", "FinanceBench")
        if not keep(record):
            continue
        item_id, doc_name = str(record["financebench_id"]), str(record["doc_name"])
        pdf = filing_path(root, doc_name)
        if not pdf.is_file():
            skipped[item_id] = f"filing {pdf.name} is not in {root / PDFS}"
            missing_filings.add(pdf.name)
            continue
        items.append(
            EvalItem(
                id=item_id,
                question=str(record["question"]),
                gold=(str(record["answer"]),),
                metric="numeric",
                load=_loader(pdf),
                evidence=one_annotator(_evidence(record)),
                metadata={
                    "doc_name": doc_name,
                    "company": record.get("company"),
                    "question_type": record.get("question_type"),
                    "question_reasoning": record.get("question_reasoning"),
                },
            )
        )
    if skipped:
        log.warning(
            "FinanceBench: skipped %d of %d questions: their %d filing(s) are not in %s (%s)",
            len(skipped),
            len(skipped) + len(items),
            len(missing_filings),
            root / PDFS,
            ", ".join(sorted(missing_filings)),
        )
    return Dataset("financebench", str(root), tuple(items), skipped, {"subset": subset} | own)
