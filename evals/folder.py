"""Questions of one's own over a folder of documents (``--dataset folder``): a library of any files a user keeps,
with each question's gold passage quoted from its document.

Layout: ``--data`` is a folder; the questions file (``questions``, required) has one JSON object a line:

    {"id": "m01", "folder": "mixed", "document": "legal/license.GPL-3.txt", "question": "...",
     "answer": "...", "evidence": ["a short verbatim span of the document"], "kind": "legal", "lang": "en"}

- ``folder``: a folder under ``--data``; every supported file under it (``minions.documents.files.walk``) goes into
  the library the questions are asked of, not only the questions' documents;
- ``document``: the question's document, a path under ``folder``; the library names a document by its file name,
  so the file names under one folder must differ;
- ``evidence``: quotes placed in the document's text (``gold.Locator``: verbatim, else ignoring case, spacing and
  punctuation), the question's gold; ``kind`` and ``lang`` (optional) group the figures (``minions bench evidence``
  prints a curve per kind).

Where other documents of the folder hold every quote too (a licence's clause quoted whole in a package's copyright
file, an option two manual pages share), each is a gold of its own: the item has one set of places per document
that holds them (as annotators, ``evidence.evidence_scores`` takes the best), so finding the passage in any of them
counts.

A question whose document is missing, or one of whose quotes is not found in it (the folder holds other versions of
the files than those the questions were written from), is skipped with the reason; the loader logs how many.
``evals/bench/written/README.md`` lists the frozen sets in this layout and ``scripts/make-search-sets`` lays out
their documents.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from minions.documents import Document, load_document
from minions.documents.files import walk
from minions.errors import DocumentError

from .errors import DatasetLayoutError
from .gold import GoldEvidence, Locator
from .items import Dataset, EvalItem, eager, read_jsonl, require_fields, warn_skipped

__all__ = ["load_folder"]

FIELDS = ("id", "folder", "document", "question", "evidence")


def load_folder(path: str | Path, *, questions: str | None = None) -> Dataset:
    """The items of ``questions`` over the folders they name under ``path`` (the module's docstring); the
    dataset's ``library`` holds those folders."""
    root = Path(path).expanduser()
    if questions is None:
        raise DatasetLayoutError("--dataset folder asks questions of your own: pass --questions FILE (JSONL).")
    file = Path(questions).expanduser()
    if not root.is_dir():
        raise DatasetLayoutError(f"No folder at {root}: pass --data, the folder that holds the documents' folders.")
    if not file.is_file():
        raise DatasetLayoutError(f"No questions file at {file}: name a JSONL file (see minions.evals.folder).")
    records, bad = read_jsonl(file, "folder questions")
    skipped = {f"line {n}": "malformed JSON line" for n in bad}
    load, shelves = cache(_load), cache(_shelf)
    items: list[EvalItem] = []
    folders: list[Path] = []
    for number, record in records:
        where = f"{file} line {number}"
        require_fields(record, FIELDS, where, "folder questions")
        folder = root / str(record["folder"])
        if not folder.is_dir():
            raise DatasetLayoutError(f"{where}: no folder {folder}: lay the documents out under --data first.")
        folders += [folder] if folder not in folders else []
        item_id, document = str(record["id"]), load(folder / str(record["document"]))
        if isinstance(document, str):
            skipped[item_id] = document
            continue
        quotes = [str(q) for q in record["evidence"] or ()]
        places = _placed(document.name, Locator(document.text), quotes)
        if not quotes or len(places) < len(quotes):
            lost = len(quotes) - len(places)
            skipped[item_id] = f"{lost} of its {len(quotes)} quotes not in {record['document']} (another version?)"
            continue
        elsewhere = [_placed(name, found, quotes) for name, found in shelves(folder) if name != document.name]
        items.append(
            EvalItem(
                id=item_id,
                question=str(record["question"]),
                gold=(str(record.get("answer") or ""),),
                metric="f1",
                load=eager(document),
                evidence=(places, *(p for p in elsewhere if len(p) == len(quotes))),
                metadata={"kind": record.get("kind"), "lang": record.get("lang"), "folder": str(record["folder"])},
            )
        )
    warn_skipped("folder questions", skipped, len(items))
    options = {"questions": str(file)}
    return Dataset("folder", str(root), tuple(items), skipped, options, library=tuple(str(f) for f in folders))


def _load(path: Path) -> Document | str:
    """The document at ``path``, or why it cannot be read."""
    if not path.is_file():
        return f"no document {path}"
    try:
        return load_document(path)
    except (DocumentError, OSError) as exc:
        return f"{path}: {exc}"


def _shelf(folder: Path) -> tuple[tuple[str, Locator], ...]:
    """Every readable document under ``folder`` (as the library reads it), by name, ready to find quotes in."""
    loaded = (_load(path) for path in walk(folder))
    return tuple((doc.name, Locator(doc.text)) for doc in loaded if isinstance(doc, Document))


def _placed(name: str, locator: Locator, quotes: list[str]) -> tuple[GoldEvidence, ...]:
    """The quotes found in document ``name`` (its text in ``locator``), each with its span."""
    places = []
    for quote in quotes:
        found = locator.find(quote)
        if found is not None:
            places.append(GoldEvidence(name, text=quote, start=found[0], end=found[1]))
    return tuple(places)
