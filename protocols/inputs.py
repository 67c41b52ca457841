"""Checking and normalizing what a caller passes to ``run``: a task and documents."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from minions.documents import Document, load_document
from minions.errors import DocumentNotFoundError, EmptyDocumentError

from .options import InputError

__all__ = ["DocumentsLike", "as_documents", "check_task"]

DocumentLike = Document | str | os.PathLike[str]
DocumentsLike = DocumentLike | Sequence[DocumentLike]


def check_task(task: str) -> str:
    if not isinstance(task, str) or not task.strip():
        raise InputError("The task is empty: say what you want to know about the documents.")
    return task.strip()


def _one(item: DocumentLike) -> Document:
    if isinstance(item, Document):
        doc = item
    elif isinstance(item, str) and not Path(item).exists():
        raise DocumentNotFoundError(
            f"No file named {item[:60]!r}: pass a path, a Document, or Document.from_text(text, name=...) "
            "to use a string of text.",
            path=item[:200],
        )
    elif isinstance(item, str | os.PathLike):
        doc = load_document(item)
    else:
        raise InputError(f"Cannot use {type(item).__name__} as a document: pass a Document or a path.")
    if not doc.text.strip():
        raise EmptyDocumentError(f"Document {doc.name!r} has no text to read.", path=str(doc.path or doc.name))
    return doc


def as_documents(documents: DocumentsLike) -> list[Document]:
    """Documents from Documents and paths (one or many); names are made unique so citations stay clear."""
    items = [documents] if isinstance(documents, Document | str | os.PathLike) else list(documents)
    if not items:
        raise InputError("No documents: pass at least one Document or path.")
    docs = [_one(item) for item in items]
    names = [d.name for d in docs]
    if len(set(names)) != len(names):
        raise InputError(f"Two documents share a name ({', '.join(sorted(names))}): give each a unique name.")
    return docs
