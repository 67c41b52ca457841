"""Files that are not what their names say are refused before any reader (or model) sees them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from minions.documents import load, load_document
from minions.errors import UnreadableDocumentError

from .doc_helpers import make_pdf

NOISE = random.Random(0).randbytes(4096)
FRENCH = "Le café de la gare a ouvert à l'été ; naïve, la cliente commanda une crème brûlée et un thé.\n" * 20
RUSSIAN = "Выручка компании за 2023 год выросла на двенадцать процентов по сравнению с прошлым годом.\n" * 20


def refused(tmp_path: Path, name: str, data: bytes, match: str) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UnreadableDocumentError, match=match) as info:
        load_document(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)) and info.value.path == str(path)
    return message


# --- text that is not text ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["noise.txt", "noise.md", "noise.markdown", "noise.html"])
def test_binary_noise_named_as_text(tmp_path: Path, name: str) -> None:
    refused(tmp_path, name, NOISE, r"but holds binary data \(NUL bytes\), not text: pass the original document")


def test_binary_noise_without_nul_bytes(tmp_path: Path) -> None:
    message = refused(
        tmp_path, "noise.txt", NOISE.replace(b"\x00", b""), r"holds binary data \(\d+% control characters\)"
    )
    assert "convert it to text" in message


def test_text_in_another_script_and_legacy_encoding(tmp_path: Path) -> None:
    refused(tmp_path, "report.txt", RUSSIAN.encode("cp1251"), r"is not UTF-8 or Latin-1 text .*: .*re-save it as UTF-8")


@pytest.mark.parametrize(
    ("data", "kind"),
    [(make_pdf(["hello"]), "a PDF"), (b"\x89PNG\r\n\x1a\n" + NOISE, "a PNG image"), (b"\x7fELF\x02\x01", "a program")],
)
def test_known_binary_formats_named_as_text(tmp_path: Path, data: bytes, kind: str) -> None:
    refused(tmp_path, "notes.txt", data, f"is named .txt but holds {kind}, not text: .*rename the file")


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("plain.txt", b"Revenue grew.\tCosts fell.\x0cNext page.\r\n", "Revenue grew.\tCosts fell.\x0cNext page.\n"),
        ("latin.txt", FRENCH.encode("latin-1"), FRENCH),
        (
            "unicode.md",
            (FRENCH + RUSSIAN + "收入增长 12% 📈 — “quoted”\n").encode(),
            FRENCH + RUSSIAN + "收入增长 12% 📈 — “quoted”\n",
        ),
        ("wide.txt", ("\ufeff" + RUSSIAN).encode("utf-16-le"), RUSSIAN),
        (
            "colours.txt",
            b"\x1b[1mBold\x1b[0m heading\nand a stray \x01 control\n",
            "\x1b[1mBold\x1b[0m heading\nand a stray \x01 control\n",
        ),
    ],
)
def test_ordinary_text_is_accepted(tmp_path: Path, name: str, data: bytes, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    assert load_document(path).text == expected


def test_windows_quotes_in_latin1_text_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "memo.txt"
    path.write_bytes(b"The \x93final\x94 figure \x96 about \x80 4.2bn \x97 was revised.\n" * 10)
    assert "final" in load_document(path).text


# --- files whose content does not match their suffix ----------------------------------------------------


@pytest.mark.parametrize(
    ("data", "looks_like"),
    [
        (b"hello", ""),
        (b"<!DOCTYPE html><html><body>Annual report</body></html>", "; it looks like an HTML page"),
        (b"PK\x03\x04" + NOISE, "; it looks like a ZIP archive"),
    ],
)
def test_pdf_that_is_not_a_pdf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, looks_like: str) -> None:
    monkeypatch.setattr(load, "load_pdf", lambda *a, **k: pytest.fail("the PDF reader ran"))
    message = refused(tmp_path, "report.pdf", data, r"is named \.pdf but is not a PDF \(no %PDF- header")
    assert looks_like in message and "rename the file to match what it holds" in message


def test_pdf_header_may_follow_some_junk(tmp_path: Path) -> None:
    path = tmp_path / "padded.pdf"
    path.write_bytes(b"\r\n" * 10 + make_pdf(["still a pdf"]))
    assert load_document(path, cache=False).text == "still a pdf"


@pytest.mark.parametrize(
    ("data", "looks_like"),
    [
        (b"not a zip at all", ""),
        (make_pdf(["hello"]), "; it looks like a PDF"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + NOISE, "; it looks like an old Office file (.doc, .xls, .ppt)"),
    ],
)
def test_docx_that_is_not_a_zip(tmp_path: Path, data: bytes, looks_like: str) -> None:
    message = refused(tmp_path, "report.docx", data, r"is named \.docx but is not a Word document \(not a ZIP archive")
    assert looks_like in message
