"""The files minions reads: which suffixes, where they are in a folder, whether their bytes match their name, and
their hash. One list and one check for the SDK, the library, the app and the command line.

``SUPPORTED_SUFFIXES`` are the files a reader exists for; ``walk`` finds them under a folder (hidden files and
folders skipped, symlinked folders not entered, so a walk never leaves the folder through a link or loops).

``contained`` is the one rule for what may be read, whichever way a file comes in (a folder walked, a watched
folder's change, the app's folders and uploads, MCP's ``add``, a server's documents): its real path, every link
followed, lies inside one of the folders allowed. ``read_contained`` reads a file under that rule without a gap
between the check and the read: it opens the real path without following a last link (``O_NOFOLLOW``) and checks
again where the open file really is, so a link swapped in meanwhile is refused, not read.

``check_content``: a .pdf must carry ``%PDF-`` in its first KiB (where PDF readers look for it) and a .docx must be
a ZIP archive. Text, Markdown and HTML must be text: no NUL bytes (outside UTF-16 with a byte-order mark), almost
no control characters, and UTF-8, or a legacy 8-bit text such as Latin-1 in which only the accented letters
break UTF-8. Whatever fails says what the file looks like instead, and what to do.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import NoReturn

from minions.errors import OutsideFolderError, UnreadableDocumentError

__all__ = [
    "SUPPORTED_SUFFIXES",
    "TEXT_SUFFIXES",
    "check_content",
    "contained",
    "linked_folders",
    "read_contained",
    "sha256_file",
    "walk",
]

SUPPORTED_SUFFIXES: tuple[str, ...] = (".txt", ".md", ".markdown", ".pdf", ".html", ".htm", ".docx")
"""The files minions reads (lower case): a folder is searched for these, and any other file is refused."""
TEXT_SUFFIXES: tuple[str, ...] = tuple(s for s in SUPPORTED_SUFFIXES if s not in (".pdf", ".docx"))
"""The supported files that must hold text."""
_HASH_BLOCK = 1 << 20
_PDF_HEADER_WITHIN = 1024
# C0 control characters other than tab, line feed, vertical tab, form feed, carriage return and escape
# (ANSI colours), and DEL. Random bytes hold about 10% of them; text almost none.
_CONTROL_BYTES = bytes(sorted(set(range(32)) - {9, 10, 11, 12, 13, 27})) + b"\x7f"
_MAX_CONTROL_SHARE = 0.01
_STRAY_CONTROLS = 2
# Latin-1 text breaks UTF-8 once per accented letter (a few percent of its bytes); random bytes, or text in
# a legacy encoding of another script (cp1251, Shift-JIS, GBK), at nearly every byte over 0x7f.
_MAX_INVALID_UTF8_SHARE = 0.3
# What a file's first bytes say it is, for the messages.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF"),
    (b"PK\x03\x04", "a ZIP archive (.docx, .xlsx, .zip)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Office file (.doc, .xls, .ppt)"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "a program"),
)
_RENAME = "pass the original document, or rename the file to match what it holds"
_CONVERT = "pass the original document, or convert it to text"
_UTF16 = "pass the original document, or convert it to text (UTF-16 without a byte-order mark: re-save it as UTF-8)"
_REENCODE = "if it is text in another encoding, re-save it as UTF-8"


def walk(folder: str | os.PathLike[str], *, follow_links: bool = False) -> Iterator[Path]:
    """The files with a supported suffix under ``folder``, folder by folder in name order; hidden files and folders
    (their names start with a dot) skipped, symlinked folders not entered (``follow_links``: entered, each real
    folder once, so a loop of links ends). A symlinked file is listed: whether it may be read (where it leads) is
    ``contained``'s to say."""
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=follow_links):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith(".") and Path(name).suffix.lower() in SUPPORTED_SUFFIXES:
                yield Path(dirpath, name)


def linked_folders(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """The links to folders under ``folder`` that ``walk`` does not enter (not under hidden folders), to report."""
    for dirpath, dirnames, _ in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in dirnames:
            if os.path.islink(os.path.join(dirpath, name)):
                yield Path(dirpath, name)


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def contained(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> Path:
    """``path``'s real location (every link followed, ``..`` taken), when it lies inside one of ``roots`` (folders,
    or files allowed by name; their own links followed too); an OutsideFolderError that says where it leads
    otherwise. A path that does not exist raises FileNotFoundError."""
    allowed = [Path(r).expanduser().resolve() for r in roots]
    real = Path(path).expanduser().resolve(strict=True)
    if not _inside(real, allowed):
        leads = "leads outside" if real != Path(os.path.abspath(Path(path).expanduser())) else "is outside"
        where = ", ".join(str(r) for r in allowed) or "no folder"
        raise OutsideFolderError(
            f"{path} {leads} the folders that may be read ({where}): skipped. Add the file or its folder itself"
            " (minions index --follow-links reads links that leave a folder, on purpose).",
            path=str(path),
        )
    return real


def read_contained(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> bytes:
    """The bytes of ``path`` under ``contained``'s rule, checked again on the file opened: a link swapped in after
    the check (the file, or a folder on its way) is refused, never read. Not a regular file (a pipe, a device):
    an UnreadableDocumentError."""
    allowed = [Path(r).expanduser().resolve() for r in roots]
    real = contained(path, allowed)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if os.path.islink(real):  # O_NOFOLLOW: the file became a link after the check
            raise OutsideFolderError(f"{path} became a link while it was read: skipped.", path=str(path)) from exc
        raise
    with os.fdopen(fd, "rb") as f:
        opened = _opened_at(fd, real)
        if opened is None or not _inside(opened, allowed):
            raise OutsideFolderError(f"{path} moved outside the allowed folders while it was read: skipped.",
                                     path=str(path))  # fmt: skip
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnreadableDocumentError(f"{path} is not a regular file: pass a document file.", path=str(path))
        return f.read()


def _opened_at(fd: int, real: Path) -> Path | None:
    """Where the file open as ``fd`` really is: the kernel's own word for it (``/proc/self/fd``) where there is one,
    else ``real`` when it is still the same file (device and inode), else None."""
    proc = Path(f"/proc/self/fd/{fd}")
    if proc.parent.is_dir():
        return Path(os.readlink(proc))
    opened, now = os.fstat(fd), os.stat(real)
    return real if (opened.st_dev, opened.st_ino) == (now.st_dev, now.st_ino) else None


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (hex), read a MiB at a time."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def check_content(where: str, suffix: str, data: bytes) -> None:
    """Raise UnreadableDocumentError if ``data`` is not what a file named ``*{suffix}`` should hold."""
    if suffix == ".pdf" and b"%PDF-" not in data[:_PDF_HEADER_WITHIN]:
        _refuse(where, f"is named .pdf but is not a PDF (no %PDF- header{_looks_like(data)})", _RENAME)
    elif suffix == ".docx" and not data.startswith(b"PK\x03\x04"):
        _refuse(where, f"is named .docx but is not a Word document (not a ZIP archive{_looks_like(data)})", _RENAME)
    elif suffix in TEXT_SUFFIXES:
        _check_text(where, suffix, data)


def _check_text(where: str, suffix: str, data: bytes) -> None:
    kind = _signature(data)
    if kind is not None:
        _refuse(where, f"is named {suffix} but holds {kind}, not text", _RENAME)
    data = _utf16_as_utf8(data)
    if b"\x00" in data:
        _refuse(where, f"is named {suffix} but holds binary data (NUL bytes), not text", _UTF16)
    controls = len(data) - len(data.translate(None, _CONTROL_BYTES))
    if controls > _STRAY_CONTROLS + _MAX_CONTROL_SHARE * len(data):
        share = controls / len(data)
        _refuse(where, f"is named {suffix} but holds binary data ({share:.0%} control characters), not text", _CONVERT)
    invalid = len(data) - len(data.decode("utf-8", "ignore").encode("utf-8"))
    if invalid > _MAX_INVALID_UTF8_SHARE * len(data):
        share = invalid / len(data)
        problem = f"is named {suffix} but is not UTF-8 or Latin-1 text ({share:.0%} of its bytes are not valid UTF-8)"
        _refuse(where, problem, _REENCODE)


def _utf16_as_utf8(data: bytes) -> bytes:
    """UTF-16 text (with a byte-order mark) as UTF-8, so that its characters are checked rather than its bytes,
    half of which are NUL; anything else as it is."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        with suppress(UnicodeDecodeError):
            return data.decode("utf-16").encode("utf-8")
    return data


def _signature(data: bytes) -> str | None:
    return next((kind for magic, kind in _SIGNATURES if data.startswith(magic)), None)


def _looks_like(data: bytes) -> str:
    """'; it looks like <kind>' for a known kind of file, else ''."""
    kind = _signature(data)
    if kind is None and data[:_PDF_HEADER_WITHIN].lstrip().lower().startswith((b"<!doctype html", b"<html")):
        kind = "an HTML page"
    return f"; it looks like {kind}" if kind else ""


def _refuse(where: str, problem: str, remedy: str) -> NoReturn:
    raise UnreadableDocumentError(f"{where} {problem}: {remedy}.", path=where)
