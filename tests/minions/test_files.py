"""The files minions reads: one suffix list, one folder walk, one content check, one file hash."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from minions.documents import SUPPORTED_SUFFIXES, files
from minions.documents.files import TEXT_SUFFIXES, check_content, contained, read_contained, sha256_file, walk
from minions.errors import OutsideFolderError, UnreadableDocumentError

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


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``docs/`` (``notes.txt``, ``sub/inner.txt``) and, beside it, ``outside/secret.txt``."""
    folder, outside = tmp_path / "docs", tmp_path / "outside"
    (folder / "sub").mkdir(parents=True)
    outside.mkdir()
    (folder / "notes.txt").write_text("notes inside")
    (folder / "sub" / "inner.txt").write_text("inner notes")
    (outside / "secret.txt").write_text("a secret outside")
    return folder, outside


def test_a_path_is_contained_where_it_really_is_once_links_and_dots_are_followed(tree: tuple[Path, Path]) -> None:
    folder, outside = tree
    os.symlink(outside / "secret.txt", folder / "file-link.txt")
    os.symlink(outside, folder / "folder-link")
    os.symlink(folder / "sub" / "inner.txt", folder / "inside-link.txt")
    assert contained(folder / "notes.txt", [folder]) == (folder / "notes.txt").resolve()
    assert contained(folder / "inside-link.txt", [folder]) == (folder / "sub" / "inner.txt").resolve()
    assert contained(folder / "sub" / ".." / "notes.txt", [folder]) == (folder / "notes.txt").resolve()
    for leaving in ["file-link.txt", "folder-link/secret.txt", "sub/../../outside/secret.txt"]:
        with pytest.raises(OutsideFolderError, match=r"outside the folders that may be read .*--follow-links"):
            contained(folder / leaving, [folder])
        with pytest.raises(OutsideFolderError):
            read_contained(folder / leaving, [folder])
    assert read_contained(folder / "inside-link.txt", [folder]) == b"inner notes"
    assert contained(folder / "file-link.txt", [folder, outside]) == (outside / "secret.txt").resolve()
    with pytest.raises(FileNotFoundError):
        contained(folder / "gone.txt", [folder])


@pytest.mark.parametrize("swapped", ["the file", "its folder"])
def test_a_link_swapped_in_between_the_check_and_the_read_is_refused(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, swapped: str
) -> None:
    """The race a checked path loses: the path passes ``contained``, then (before it is opened) the file, or a
    folder on its way, is replaced by a link outside; the read is refused, and the secret's bytes never read."""
    folder, outside = tree
    checked = files.contained

    def check_then_swap(path: str | os.PathLike[str], roots: object) -> Path:
        real = checked(path, roots)  # type: ignore[arg-type]
        if swapped == "the file":
            (folder / "sub" / "inner.txt").unlink()
            os.symlink(outside / "secret.txt", folder / "sub" / "inner.txt")
        else:
            (folder / "sub").rename(folder / "sub-was")
            (outside / "inner.txt").write_text("a secret outside")
            os.symlink(outside, folder / "sub")
        return real

    monkeypatch.setattr(files, "contained", check_then_swap)
    with pytest.raises(OutsideFolderError, match="while it was read"):
        read_contained(folder / "sub" / "inner.txt", [folder])


def test_a_pipe_is_not_read(tree: tuple[Path, Path]) -> None:
    folder, _ = tree
    os.mkfifo(folder / "pipe.txt")
    with pytest.raises(UnreadableDocumentError, match="not a regular file"):
        read_contained(folder / "pipe.txt", [folder])


def test_a_walk_follows_folder_links_only_when_asked_and_ends_in_a_loop(tree: tuple[Path, Path]) -> None:
    folder, outside = tree
    os.symlink(outside, folder / "folder-link")
    os.symlink(folder, folder / "sub" / "loop")
    assert [p.relative_to(folder).as_posix() for p in walk(folder)] == ["notes.txt", "sub/inner.txt"]
    followed = [p.relative_to(folder).as_posix() for p in walk(folder, follow_links=True)]
    assert followed == ["notes.txt", "folder-link/secret.txt", "sub/inner.txt"]


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
