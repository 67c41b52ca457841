"""PDF files: the text of every page, read with PDFium (pypdfium2), and cached on disk.

PDFium reads a 10-K at well over a hundred pages a second on one core (pypdf, used before, managed about two
here), in the order the page draws its text, which for filings and papers is the reading order. Extracted
text is kept in an on-disk cache keyed by the file's sha256 (see ``pdf_cache``), so a document is read once.

PDFium decrypts with the empty password by itself (RC4 and AES, including AES-256); a PDF that needs a real
password, or one it cannot parse (corrupt, truncated, not a PDF), is an UnreadableDocumentError that says
what to do.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from minions.documents.pdf_cache import read_cache, write_cache
from minions.documents.sections import detect_sections
from minions.documents.types import Document, Page
from minions.errors import EmptyDocumentError, UnreadableDocumentError

if TYPE_CHECKING:
    import pypdfium2

__all__ = ["load_pdf", "read_pages"]

log = logging.getLogger(__name__)

_PAGE_SEPARATOR = "\n\n"
# PDFium is not thread-safe, not even across documents: one call into it at a time in this process. Pages
# and documents are closed explicitly, inside the lock, rather than by the garbage collector in any thread.
_PDFIUM_LOCK = threading.Lock()
# PDFium reports a hyphen that ends a line as U+FFFE (0x02 from some calls) and drops the line break after
# it. In filings such hyphens are mostly real ("long-" / "term"), so they are kept as "-".
_LINE_END_HYPHENS = str.maketrans({"\ufffe": "-", "\x02": "-"})
# pypdfium2's error codes for a document that fails to load (FPDF_ERR_*).
_ERR_PASSWORD = 4
_ERR_SECURITY = 5


def load_pdf(p: Path, data: bytes, *, cache: bool = True, where: str | None = None) -> Document:
    """A Document with one Page per PDF page (empty pages kept), from the cache when it holds this file.
    ``where``: what errors call the file (default: its path)."""
    where = where or str(p)
    digest = hashlib.sha256(data).hexdigest()
    cached = read_cache(digest) if cache else None
    if cached is not None:
        log.debug("PDF text of %s from cache", where)
        texts, failed = cached
    else:
        texts, failed = read_pages(data, where)
        if cache:
            write_cache(digest, texts, failed)
    if not any(t.strip() for t in texts):
        raise EmptyDocumentError(
            f"{where} has no text layer (a scan?): run OCR on it first (ocrmypdf in.pdf out.pdf) and pass the result.",
            path=where,
        )
    text, pages = _join_pages(texts)
    metadata = {"format": "pdf", "sha256": digest, "bytes": len(data), "failed_pages": failed}
    return Document(name=p.name, text=text, path=str(p), pages=pages, sections=detect_sections(text), metadata=metadata)


def _join_pages(texts: list[str]) -> tuple[str, tuple[Page, ...]]:
    """The pages' texts joined by a blank line, and each page's 1-based number and offsets in the result."""
    pages, offset = [], 0
    for number, t in enumerate(texts, start=1):
        if number > 1:
            offset += len(_PAGE_SEPARATOR)
        pages.append(Page(number, offset, offset + len(t)))
        offset += len(t)
    return _PAGE_SEPARATOR.join(texts), tuple(pages)


def read_pages(data: bytes, where: str) -> tuple[list[str], list[int]]:
    """The cleaned text of every page, and the 1-based numbers of the pages that failed (kept empty)."""
    import pypdfium2

    with _PDFIUM_LOCK:
        try:
            pdf = pypdfium2.PdfDocument(data)
        except pypdfium2.PdfiumError as exc:
            raise _open_error(exc, where) from exc
        try:
            return _page_texts(pdf, where)
        finally:
            pdf.close()


def _open_error(exc: pypdfium2.PdfiumError, where: str) -> UnreadableDocumentError:
    if exc.err_code == _ERR_PASSWORD:
        message = (
            f"{where} is encrypted with a password: decrypt it first "
            "(qpdf --password=PASSWORD --decrypt in.pdf out.pdf) and pass the decrypted copy."
        )
    elif exc.err_code == _ERR_SECURITY:
        message = (
            f"{where} uses a security handler PDFium does not support: decrypt it with the tool that made it "
            "and pass the decrypted copy."
        )
    else:
        message = (
            f"{where} is not a readable PDF ({str(exc).rstrip('.')}): check the file is complete, or repair it "
            "(qpdf in.pdf out.pdf) and pass the repaired copy."
        )
    return UnreadableDocumentError(message, path=where)


def _page_texts(pdf: pypdfium2.PdfDocument, where: str) -> tuple[list[str], list[int]]:
    import pypdfium2

    texts: list[str] = []
    failed: list[int] = []
    for index in range(len(pdf)):
        try:
            texts.append(_clean_page(_page_text(pdf, index)))
        # A page with a broken content stream fails alone; the other pages survive.
        except pypdfium2.PdfiumError as exc:
            log.warning("%s: page %d: text extraction failed (%s); keeping it as an empty page", where, index + 1, exc)
            texts.append("")
            failed.append(index + 1)
    return texts, failed


def _page_text(pdf: pypdfium2.PdfDocument, index: int) -> str:
    """The raw text of page ``index`` (0-based), in the order the page draws it."""
    page = pdf[index]
    try:
        textpage = page.get_textpage()
        try:
            return str(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()


def _clean_page(text: str) -> str:
    """Unix line ends, line-end hyphens as "-", no trailing spaces on lines, no runs of blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_LINE_END_HYPHENS)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()
