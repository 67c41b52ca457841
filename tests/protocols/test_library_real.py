"""The library end to end on the real model: ``minions index`` a folder, then ``minions ask --library``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minions.apps.cli.main import main

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parents[2] / "examples" / "northwind-annual-report-2025.md"
OTHER = (
    "# Harbor Logistics annual report 2025\n\nHarbor Logistics moved 1.2 million containers in 2025. "
    "Its revenue was $118 million, up 4 percent.\n\nThe company opened two warehouses in Rotterdam.\n"
)
NOTES = "# Meeting notes\n\nThe board met in March and approved the budget for the new office.\n"


def test_a_folder_indexed_then_asked_as_a_library_answers_from_the_document_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(DEMO, folder / DEMO.name)
    (folder / "harbor-2025.md").write_text(OTHER)
    (folder / "notes.md").write_text(NOTES)
    (folder / "empty.txt").write_text("")
    library = tmp_path / "library"
    assert main(["index", str(folder), "--library", str(library)]) == 0
    shown = capsys.readouterr()
    assert "3 added" in shown.out and "1 skipped" in shown.out and "empty.txt" in shown.err
    question = "What was Northwind's total revenue in 2025?"
    assert main(["ask", question, "--library", str(library)]) == 0
    out = capsys.readouterr().out
    assert "$31.8 million" in out and "northwind-annual-report-2025.md, line 27" in out
    assert "searched all 3 documents; route " in out and " ms, rank " in out and " ms, prefill " in out
    assert main(["index", str(folder), "--library", str(library)]) == 0  # again: nothing to read
    assert "0 added, 3 unchanged" in capsys.readouterr().out
    monkeypatch.setenv("MINIONS_LIBRARY", str(library))  # the default library, the question after --library
    assert main(["ask", "--library", "What did Harbor Logistics earn in 2025?"]) == 0
    assert "According to harbor-2025.md" in capsys.readouterr().out


def test_index_reembed_computes_every_vector_again_with_the_model_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from minions.backends.embeddings import _shipped_model

    monkeypatch.setenv("MINIONS_EMBEDDINGS", f"onnx/{_shipped_model()}")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.md").write_text(NOTES)
    library = tmp_path / "library"
    assert main(["index", str(folder), "--library", str(library), "--json"]) == 0
    embedded = json.loads(capsys.readouterr().out.splitlines()[-1])["embedded"]
    assert embedded > 0
    monkeypatch.setenv("MINIONS_EMBEDDINGS", f"sentence-transformers/{_shipped_model()}")  # the same model by PyTorch
    assert main(["index", "--reembed", "--library", str(library)]) == 0
    assert f"{embedded} chunks embedded again with sentence-transformers/model" in capsys.readouterr().out
    assert main(["index", "--library", str(library)]) == 2  # nothing named, nothing to do
    assert "--reembed" in capsys.readouterr().err
