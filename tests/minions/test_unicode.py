"""Text that is not valid Unicode is replaced before it reaches a tokenizer or a file, and the run says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from minions.documents import Document, load_document
from minions.unicode import valid_text

NOTE = "Quarterly note.\n\nRevenue for the first quarter was 3.1 million euros, mostly from consulting.\n"


def test_surrogates_and_nul_become_the_replacement_character_at_the_same_length():
    text = "a\ud800b\udc80\x00c \U0001f600"
    fixed, n = valid_text(text)
    assert fixed == "a\ufffdb\ufffd\ufffdc \U0001f600" and n == 3 and len(fixed) == len(text)
    fixed.encode("utf-8")  # what a tokenizer, SQLite or a file name needs
    assert valid_text("plain") == ("plain", 0)


def test_a_document_is_made_valid_however_it_is_made_and_keeps_its_offsets():
    doc = Document.from_text("# Results\n\nRevenue \ud800 rose.\n\n# Outlook\n\nFlat.", name="r\udcff.md")
    assert doc.name == "r\ufffd.md" and "\ud800" not in doc.text and doc.replaced_characters == 2
    assert [doc.text[s.start : s.start + 9] for s in doc.sections] == ["# Results", "# Outlook"]
    clean = Document.from_text("Nothing odd here.", name="ok.txt")
    assert clean.replaced_characters == 0 and "replaced_characters" not in clean.metadata


def test_a_file_whose_name_is_not_utf8_loads_under_a_valid_name(tmp_path: Path):
    path = os.fsdecode(os.fsencode(tmp_path) + b"/report-\xff.txt")  # the name as the OS gives it back
    Path(path).write_text(NOTE)
    doc = load_document(path)
    assert doc.name == "report-\ufffd.txt" and doc.replaced_characters == 1 and doc.text == NOTE


def test_a_run_replaces_them_in_the_question_and_says_so():
    from minions.backends.scripted import ScriptedBackend
    from minions.protocols import LocalOnly

    from ..protocols.helpers import job_reply

    seen = []

    def local(messages, params):
        seen.extend(m.content for m in messages)
        return job_reply(messages, params)

    doc = Document.from_text(NOTE + "\ud800", name="note.txt")
    result = LocalOnly(ScriptedBackend("scripted/local", responder=local)).run(
        "What was revenue in the first quarter? \udc80\udc81", [doc]
    )
    assert list(result.notes[:2]) == [
        "Replaced 2 characters of the question that are not valid Unicode (unpaired surrogates, NUL) with U+FFFD.",
        "Replaced 1 character of note.txt that is not valid Unicode (unpaired surrogates, NUL) with U+FFFD.",
    ]
    assert seen and all(valid_text(text)[1] == 0 for text in seen)  # what the model read


@pytest.mark.slow
def test_minions_ask_takes_undecodable_arguments_on_the_real_model(tmp_path: Path):
    """Bytes that are not UTF-8 in a file's name and in the question reach Python as surrogates; llama.cpp's
    tokenizer would fail on them. The CLI answers instead, with no traceback."""
    folder = os.fsencode(tmp_path)
    (Path(os.fsdecode(folder + b"/note-\xff.txt"))).write_text(NOTE)
    argv = [sys.executable.encode(), b"-m", b"minions", b"ask", folder + b"/note-\xff.txt",
            b"What was revenue in the first quarter? \xff\xfe", b"--protocol", b"local"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, timeout=300, env={**os.environ, "MINIONS_REMOTE": ""})
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert b"3.1 million" in proc.stdout
