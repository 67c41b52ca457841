"""``load_document``: check a file, and that its bytes are what its suffix says, then hand them to the reader."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from minions.documents.docx import load_docx
from minions.documents.files import SUPPORTED_SUFFIXES, check_content, read_contained
from minions.documents.html import load_html
from minions.documents.pdf import load_pdf
from minions.documents.text import load_text
from minions.documents.types import Document
from minions.errors import DocumentNotFoundError, EmptyDocumentError, UnreadableDocumentError

__all__ = ["load_document", "load_documents"]

log = logging.getLogger(__name__)


def load_document(
    path: str | os.PathLike[str],
    *,
    cache: bool = True,
    shown: str | None = None,
    within: Sequence[str | os.PathLike[str]] | None = None,
) -> Document:
    """Load one file. ``cache``: reuse and keep the text extracted from a PDF on disk. ``shown``: what errors call
    the file, where its path is not what the user knows it by (an upload the app stored under a name of its own).
    ``within``: the folders it may be read from (``files.read_contained``: every link followed, checked again on
    the file opened); an OutsideFolderError where it leads elsewhere.

    Raises DocumentNotFoundError, UnreadableDocumentError or EmptyDocumentError with a one-line fix.
    """
    p = Path(path).expanduser()
    where = shown or str(p)
    data = _read(p, where, within)
    suffix = p.suffix.lower()
    check_content(where, suffix, data)
    if suffix == ".pdf":
        doc = load_pdf(p, data, cache=cache, where=where)
    elif suffix == ".docx":
        doc = load_docx(p, data, where=where)
    elif suffix in (".html", ".htm"):
        doc = load_html(p, data)
    else:
        doc = load_text(p, data)
    if not doc.text.strip():
        raise EmptyDocumentError(f"{where} contains no text: pass a file with text in it.", path=where)
    log.debug("loaded %s: %d chars, %d pages, %d sections", where, len(doc.text), len(doc.pages), len(doc.sections))
    return doc


def load_documents(paths: Iterable[str | os.PathLike[str]], *, cache: bool = True) -> list[Document]:
    """Load several files in order; the first that fails raises."""
    return [load_document(p, cache=cache) for p in paths]


def _read(p: Path, where: str, within: Sequence[str | os.PathLike[str]] | None = None) -> bytes:
    """The bytes of an existing, non-empty file with a supported suffix; a DocumentError that says why not."""
    if not p.exists():
        raise DocumentNotFoundError(f"No such file: {where}: check the path.", path=where)
    if p.is_dir():
        raise UnreadableDocumentError(
            f"{where} is a directory: pass the files inside it (e.g. {where}/*.pdf).", path=where
        )
    if not p.is_file():  # a device or a pipe: reading it might never end
        raise UnreadableDocumentError(f"{where} is not a regular file: pass a document file.", path=where)
    suffix = p.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise UnreadableDocumentError(
            f"Cannot read {where}: unsupported file type {suffix or '(none)'!r}; convert it to one of "
            f"{', '.join(SUPPORTED_SUFFIXES)}.",
            path=where,
        )
    try:
        data = p.read_bytes() if within is None else read_contained(p, within)
    except OSError as exc:
        raise UnreadableDocumentError(
            f"Cannot read {where} ({exc.strerror}): check its permissions.", path=where
        ) from exc
    if not data.strip():
        raise EmptyDocumentError(f"{where} is empty: pass a file with text in it.", path=where)
    return data
