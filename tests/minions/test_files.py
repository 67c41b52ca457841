"""The files minions reads: one suffix list, one folder walk, one content check, one file hash."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from minions.documents import SUPPORTED_SUFFIXES
from minions.documents.files import TEXT_SUFFIXES, check_content, sha256_file, walk
from minions.errors import UnreadableDocumentError

from .doc_helpers import make_pdf


def test_the_supported_suffixes_are_the_readers_and_text_is_all_but_pdf_and_docx() -> None:
    assert SUPPORTED_SUFFIXES == (".txt", ".md", ".markdown", ".pdf", ".html", ".htm", ".docx")
    assert set(TEXT_SUFFIXES) == set(SUPPORTED_SUFFIXES) - {".pdf", ".docx"}


def test_a_walk_finds_supported_files_in_order_skipping_hidden_ones_and_symlinked_folders(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    for name in ["b.md", "a.TXT", "sub/c.pdf", "script.sh", ".hidden.txt", ".git/d.txt", "z/e.docx"]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("a secret")
    os.symlink(outside, folder / "link")  # a symlinked folder is not entered
    os.symlink(outside / "secret.txt", folder / "linked.txt")  # a symlinked file is listed: the caller decides

    found = [p.relative_to(folder).as_posix() for p in walk(folder)]

    assert found == ["a.TXT", "b.md", "linked.txt", "sub/c.pdf", "z/e.docx"]


@pytest.mark.parametrize(
    ("suffix", "data", "message"),
    [
        (".txt", b"\x00\x01\x02\x03binary\x00\xff" * 50, r"is named \.txt but holds binary data"),
        (".md", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, r"is named \.md but holds a PNG image, not text"),
        (".pdf", b"<html>not a pdf</html>", r"is named \.pdf but is not a PDF \(no %PDF- header; it looks like"),
        (".docx", b"plain words", r"is named \.docx but is not a Word document"),
    ],
)
def test_content_that_does_not_match_its_suffix_is_refused(suffix: str, data: bytes, message: str) -> None:
    with pytest.raises(UnreadableDocumentError, match=message) as info:
        check_content(f"file{suffix}", suffix, data)
    assert info.value.path == f"file{suffix}"


@pytest.mark.parametrize(
    ("suffix", "data"),
    [(".txt", "Café revenue grew.\n".encode()), (".pdf", make_pdf(["hello"])), (".docx", b"PK\x03\x04rest")],
)
def test_content_that_matches_its_suffix_passes(suffix: str, data: bytes) -> None:
    check_content(f"file{suffix}", suffix, data)


def test_sha256_file_is_hashlibs_digest_of_the_bytes(tmp_path: Path) -> None:
    data = os.urandom(3 << 20) + b"tail"  # more than one block read
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
