"""Documents: load text, Markdown, PDF, HTML and .docx files into one ``Document`` with pages and sections.

A ``Document`` is the full text plus offsets into it: ``pages`` (PDFs; pages are joined with a blank line) and
``sections`` (detected headings). Chunkers and provenance work with character offsets only, so everything a
chunk says about where it came from (page numbers, section title) is computed from these offsets.

    types       Document, Page, Section
    sections    heading detection in plain text
    load        load_document: checks the file, picks the reader by suffix
    files       the supported suffixes, the walk of a folder, the check that a file's bytes are what its
                suffix says (binary noise named .txt, ...), a file's SHA-256
    text, html, docx, pdf     the readers (PDF text comes from PDFium)
    pdf_cache   the on-disk cache of text extracted from PDFs
    bench       ``minions bench pdf``: pages a second
"""

from __future__ import annotations

from minions.documents.files import SUPPORTED_SUFFIXES
from minions.documents.load import load_document, load_documents
from minions.documents.types import Document, Page, Section

__all__ = [
    "SUPPORTED_SUFFIXES",
    "Document",
    "Page",
    "Section",
    "load_document",
    "load_documents",
]
