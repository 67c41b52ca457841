"""Test data for the document tests: where the shared benchmark files are, and small PDFs made by hand."""

from __future__ import annotations

import io
from pathlib import Path

import pypdf
import pytest

from ..conftest import BENCHMARK_DATA

DATA = BENCHMARK_DATA


def needs(path: Path) -> Path:
    """``path`` if the shared benchmark data holds it; the test is skipped, saying why, if not."""
    if not path.exists():
        pytest.skip(f"shared benchmark data not found at {path}")
    return path


def make_pdf(pages: list[str]) -> bytes:
    """A small valid PDF whose page i shows the lines of ``pages[i]`` in Helvetica ("" makes a blank page)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(pages))), len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        lines = [ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for ln in text.splitlines()]
        content = b"\n".join(
            b"BT /F1 12 Tf 72 %d Td (%s) Tj ET" % (720 - 16 * k, ln.encode("latin-1")) for k, ln in enumerate(lines)
        )
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


def encrypt(pdf: bytes, user_password: str, algorithm: str = "AES-256") -> bytes:
    """``pdf`` encrypted by pypdf; an empty ``user_password`` opens it (the owner password only restricts)."""
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm=algorithm)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()
