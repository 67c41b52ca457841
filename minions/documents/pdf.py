"""PDF files: text per page (pypdf), extracted in parallel worker processes when safe, cached on disk.

PDF text extraction (pypdf) is slow, about a tenth of a second a page, so a 300-page filing takes half a
minute on one core. Pages are therefore extracted in parallel worker processes when that is safe, and the
extracted text is kept in an on-disk cache keyed by the file's sha256 (``<cache_dir>/pdf-text``).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import multiprocessing
import os
import re
import sys
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from minions.documents.sections import detect_sections
from minions.documents.types import Document, Page
from minions.errors import EmptyDocumentError, UnreadableDocumentError
from minions.paths import cache_dir

__all__ = ["load_pdf"]

log = logging.getLogger(__name__)

_PAGE_SEPARATOR = "\n\n"

# Bump when the cleaning of extracted text changes, so that cached text is extracted again.
_PDF_CACHE_FORMAT = 1
_PARALLEL_MIN_PAGES = 24
_PAGES_PER_WORKER_MIN = 12


def _clean_page(text: str) -> str:
    """Drop trailing spaces on lines and runs of blank lines, which pypdf emits in large numbers."""
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _open_pdf(source: Any, where: str) -> Any:
    """A pypdf reader, decrypted with the empty password if needed; UnreadableDocumentError otherwise."""
    import pypdf
    from pypdf.errors import DependencyError, PyPdfError

    try:
        reader = pypdf.PdfReader(source)
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise UnreadableDocumentError(
                f"{where} is encrypted: decrypt it first (qpdf --password=... --decrypt in.pdf out.pdf) "
                "and pass the decrypted copy.",
                path=where,
            )
        len(reader.pages)  # parses the page tree: a broken one fails here rather than halfway through
    except DependencyError as exc:
        raise UnreadableDocumentError(
            f"{where} is encrypted with AES: pip install cryptography, or decrypt it first "
            "(qpdf --decrypt in.pdf out.pdf) and pass the decrypted copy.",
            path=where,
        ) from exc
    except (PyPdfError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        raise UnreadableDocumentError(
            f"{where} is not a readable PDF ({exc}): check the file is complete, or repair it "
            "(qpdf in.pdf out.pdf) and pass the repaired copy.",
            path=where,
        ) from exc
    return reader


def _extract_range(where: str, first: int, stop: int) -> list[tuple[str, str | None]]:
    """Text of pages ``first..stop-1`` of the PDF at ``where`` as (text, error); runs in worker processes."""
    return _extract_reader_pages(_open_pdf(where, where), first, stop)


def _extract_reader_pages(reader: Any, first: int, stop: int) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for i in range(first, stop):
        try:
            out.append((_clean_page(reader.pages[i].extract_text()), None))
        # pypdf parses untrusted content streams: whatever one page raises, the other pages must survive.
        except Exception as exc:
            out.append(("", f"{type(exc).__name__}: {exc}"))
    return out


def _worker_count(pages: int, workers: int | None) -> int:
    if workers is not None:
        return max(1, min(workers, pages))
    if pages < _PARALLEL_MIN_PAGES:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, pages // _PAGES_PER_WORKER_MIN, 16))


def _can_fork() -> bool:
    # Forking is only safe from a process with one thread (a lock held by another thread would stay locked
    # in the child forever), and daemonic processes may not have children. Other start methods re-import the
    # caller's __main__, which breaks scripts without an ``if __name__ == "__main__"`` guard.
    return (
        sys.platform != "win32"
        and "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
        and not multiprocessing.current_process().daemon
    )


def _extract_pages(reader: Any, where: str, workers: int) -> list[tuple[str, str | None]]:
    """(text, error) for every page: in ``workers`` forked processes when that is safe, else here."""
    n_pages = len(reader.pages)
    if workers > 1 and _can_fork():
        step = -(-n_pages // workers)
        ranges = [(where, a, min(a + step, n_pages)) for a in range(0, n_pages, step)]
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=len(ranges), mp_context=ctx) as pool:
                chunks = list(pool.map(_extract_range, *zip(*ranges, strict=True)))
            return [page for chunk in chunks for page in chunk]
        except (OSError, RuntimeError, UnreadableDocumentError) as exc:  # BrokenProcessPool is a RuntimeError
            log.warning("parallel PDF extraction failed (%s); extracting %s in this process", exc, where)
    return _extract_reader_pages(reader, 0, n_pages)


def _cache_path(digest: str) -> Path:
    return cache_dir() / "pdf-text" / f"{digest}.json"


def _extractor_id() -> str:
    import pypdf

    return f"pypdf {pypdf.__version__} / {_PDF_CACHE_FORMAT}"


def _read_cache(digest: str) -> dict[str, Any] | None:
    path = _cache_path(digest)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable PDF text cache entry %s (%s)", path, exc)
        return None
    if not isinstance(entry, dict) or entry.get("extractor") != _extractor_id():
        return None
    pages = entry.get("pages")
    if not isinstance(pages, list) or not all(isinstance(t, str) for t in pages):
        return None
    return entry


def _write_cache(digest: str, entry: dict[str, Any]) -> None:
    """Write atomically (temporary file, then rename) so that a concurrent reader never sees half a file."""
    path = _cache_path(digest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{digest[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log.warning("could not cache extracted PDF text at %s (%s)", path, exc)


def load_pdf(p: Path, data: bytes, *, cache: bool, workers: int | None) -> Document:
    where = str(p)
    digest = hashlib.sha256(data).hexdigest()
    entry = _read_cache(digest) if cache else None
    if entry is not None:
        log.debug("PDF text of %s from cache %s", where, _cache_path(digest))
    else:
        reader = _open_pdf(io.BytesIO(data), where)
        extracted = _extract_pages(reader, where, _worker_count(len(reader.pages), workers))
        failed = [i + 1 for i, (_, err) in enumerate(extracted) if err is not None]
        for number in failed:
            log.warning(
                "%s: page %d: text extraction failed (%s); keeping it as an empty page",
                where,
                number,
                extracted[number - 1][1],
            )
        entry = {"extractor": _extractor_id(), "pages": [t for t, _ in extracted], "failed_pages": failed}
        if cache:
            _write_cache(digest, entry)
    texts: list[str] = entry["pages"]
    if not any(t.strip() for t in texts):
        raise EmptyDocumentError(
            f"{where} has no text layer (a scan?): run OCR on it first (ocrmypdf in.pdf out.pdf) and pass the result.",
            path=where,
        )
    pages, offset = [], 0
    for number, t in enumerate(texts, start=1):
        if number > 1:
            offset += len(_PAGE_SEPARATOR)
        pages.append(Page(number, offset, offset + len(t)))
        offset += len(t)
    text = _PAGE_SEPARATOR.join(texts)
    return Document(
        name=p.name,
        text=text,
        path=where,
        pages=tuple(pages),
        sections=detect_sections(text),
        metadata={
            "format": "pdf",
            "sha256": digest,
            "bytes": len(data),
            "failed_pages": list(entry.get("failed_pages", [])),
        },
    )
