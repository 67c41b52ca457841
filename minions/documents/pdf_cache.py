"""The on-disk cache of text extracted from PDFs: ``<cache_dir>/pdf-text/<sha256>.v<FORMAT>.json``.

An entry holds the text of every page and the numbers of the pages that failed, and names the extractor that
wrote it; an entry from another extractor (or another version of it) is a miss, as is one that cannot be read.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from minions.paths import cache_dir

__all__ = ["cache_path", "read_cache", "write_cache"]

log = logging.getLogger(__name__)

# Bump when the extraction or the cleaning of its text changes, so that cached text is extracted again.
# 1: pypdf. 2: PDFium (pypdfium2).
FORMAT = 2


def cache_path(digest: str) -> Path:
    return cache_dir() / "pdf-text" / f"{digest}.v{FORMAT}.json"


@cache
def _extractor_id() -> str:
    return f"pypdfium2 {version('pypdfium2')} / {FORMAT}"


def read_cache(digest: str) -> tuple[list[str], list[int]] | None:
    """The cached (page texts, failed page numbers) of the PDF with this sha256, or None."""
    path = cache_path(digest)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable PDF text cache entry %s (%s)", path, exc)
        return None
    if not _valid(entry):
        return None
    return entry["pages"], entry["failed_pages"]


def _valid(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and entry.get("extractor") == _extractor_id()
        and isinstance(entry.get("pages"), list)
        and all(isinstance(t, str) for t in entry["pages"])
        and isinstance(entry.get("failed_pages"), list)
        and all(isinstance(n, int) for n in entry["failed_pages"])
    )


def write_cache(digest: str, pages: list[str], failed_pages: list[int]) -> None:
    """Write atomically (temporary file, then rename) so that a concurrent reader never sees half a file."""
    path = cache_path(digest)
    entry = {"extractor": _extractor_id(), "pages": pages, "failed_pages": failed_pages}
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
