"""The library end to end on the real model: ``minions index`` a folder, then ``minions ask --library``."""

from __future__ import annotations

import json
import shutil
import time
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


def _folder_with_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, texts: dict[str, str]) -> Path:
    """A folder of ``texts`` (name: text), with the shipped embedding model run by ONNX Runtime."""
    from minions.backends.embeddings import _shipped_model

    monkeypatch.setenv("MINIONS_EMBEDDINGS", f"onnx/{_shipped_model()}")
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in texts.items():
        (folder / name).write_text(text)
    return folder


def test_index_reembed_computes_every_vector_again_with_the_model_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from minions.backends.embeddings import _shipped_model

    folder = _folder_with_the_model(tmp_path, monkeypatch, {"notes.md": NOTES})
    library = tmp_path / "library"
    assert main(["index", str(folder), "--library", str(library), "--json", "--wait"]) == 0
    embedded = json.loads(capsys.readouterr().out.splitlines()[-1])["embedded"]
    assert embedded > 0
    monkeypatch.setenv("MINIONS_EMBEDDINGS", f"sentence-transformers/{_shipped_model()}")  # the same model by PyTorch
    assert main(["index", "--reembed", "--library", str(library), "--wait"]) == 0
    assert f"{embedded} chunks embedded again with sentence-transformers/model" in capsys.readouterr().out
    assert main(["index", "--library", str(library)]) == 2  # nothing named, nothing to do
    assert "--reembed" in capsys.readouterr().err


def test_index_returns_with_the_words_and_the_vectors_follow_in_the_background(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from minions.protocols.embed_lock import lock_path

    folder = _folder_with_the_model(tmp_path, monkeypatch, {DEMO.name: DEMO.read_text(), "harbor-2025.md": OTHER})
    library = tmp_path / "library"
    assert main(["index", str(folder), "--library", str(library), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["embedded"] == 0 and summary["added"] == 2  # the words only: the vectors are the process's
    meaning = summary["meaning"]
    assert meaning["total"] > 0 and meaning["pid"] and meaning["model"]

    def status() -> dict[str, object]:
        assert main(["index", "--status", "--json", "--library", str(library)]) == 0
        return dict(json.loads(capsys.readouterr().out))

    first = status()
    assert first["total"] == meaning["total"] and first["documents"] == 2
    deadline = time.monotonic() + 600  # generous: two shared cores; the condition, not the time, is asserted
    while (now := status())["running"]:
        assert time.monotonic() < deadline, f"the background embedding did not finish: {now}"
        time.sleep(0.5)
    assert now["embedded"] == now["total"] == meaning["total"] and not now["running"] and now["log"] is None
    assert now["sentences"] == now["total"]  # then the chunks' sentences, ahead of the questions
    assert lock_path(str(library / "library.sqlite")).is_file()
    assert main(["index", "--status", "--library", str(library)]) == 0
    total = meaning["total"]
    assert f"{total}/{total} chunks embedded ({now['model']}), their sentences {total}/{total}, done" in (
        capsys.readouterr().out
    )
    assert main(["index", str(folder), "--library", str(library)]) == 0  # all there: nothing to resume
    assert "in the background" not in capsys.readouterr().out
