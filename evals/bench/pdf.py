"""``minions bench pdf``: how many pages a second ``load_document`` reads from PDFs, and pypdf beside it.

The PDFium figure times what production runs: ``load_document(path, cache=False)``, so reading the file,
hashing it, extracting and cleaning every page and detecting sections. The pypdf figure, there when pypdf is
installed, times its ``extract_text`` alone, page by page (the reader used before PDFium), so it flatters pypdf
slightly.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from minions.documents.load import load_document

from ..financebench import find_filing

__all__ = ["pdf_bench"]


def pdf_bench(
    files: Iterable[str | os.PathLike[str]],
    *,
    data: str | os.PathLike[str] | None = None,
    pypdf_pages: int | None = None,
) -> Iterator[dict[str, Any]]:
    """One result per file: pages, seconds and pages_per_s, then pypdf_pages, pypdf_seconds, pypdf_pages_per_s.

    ``data``: a folder to find bare file names in (``find_filing``: a FinanceBench checkout or its pdfs/);
    ``pypdf_pages``: time
    pypdf on the first N pages only (0: not at all; None: every page).
    """
    with_pypdf = pypdf_pages != 0 and importlib.util.find_spec("pypdf") is not None
    for name in files:
        path = find_filing(name, data)
        start = time.perf_counter()
        pages = len(load_document(path, cache=False).pages)
        line: dict[str, Any] = {"file": path.name, **_rate("", pages, time.perf_counter() - start)}
        if with_pypdf:
            line |= _pypdf_rate(path, pypdf_pages)
        yield line


def _rate(prefix: str, pages: int, seconds: float) -> dict[str, Any]:
    return {
        f"{prefix}pages": pages,
        f"{prefix}seconds": round(seconds, 3),
        f"{prefix}pages_per_s": round(pages / seconds, 1) if seconds > 0 else None,
    }


def _pypdf_rate(path: Path, limit: int | None) -> dict[str, Any]:
    """pypdf's pages, seconds and pages/s over the first ``limit`` pages, or the error it stopped with."""
    import pypdf
    from pypdf.errors import PyPdfError

    start = time.perf_counter()
    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted:
            reader.decrypt("")
        pages = reader.pages[:limit]
        for page in pages:
            page.extract_text()
    except PyPdfError as exc:
        return {"pypdf_error": f"{type(exc).__name__}: {exc}"}
    return _rate("pypdf_", len(pages), time.perf_counter() - start)
