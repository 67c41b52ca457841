"""Folders that stay in sync (``protocols.watch``): real files in a real folder, changed while the operating
system's watcher (``watchfiles``) follows them, each change seen in ``Library.search`` within a deadline."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from minions.apps.cli.main import main
from minions.errors import DocumentNotFoundError
from minions.protocols.library import AddProgress, Library
from minions.protocols.watch import FolderWatch

DEADLINE_S = 10.0
"""The issue's promise: a change is in the index within 10 s."""
FILLER = "The cooperative keeps its accounts in order and reports to its members every quarter. " * 4


def report(topic: str) -> str:
    return f"# Report\n\n{FILLER}\n\nThis report is about {topic}.\n\n{FILLER}\n"


def wait_for(what: str, done: Callable[[], bool]) -> None:
    """Wait until ``done()`` holds, for at most ``DEADLINE_S``; fail saying what did not happen."""
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:g} s: {what}")
        time.sleep(0.05)


def found_in(library: Library, word: str) -> set[str]:
    return {r.chunk.document for r in library.search(word).ranking.ranked}


class Seen:
    """The progress lines of a watch, as (file name, status), from the moment it is asked to ``record``."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.recording = False
        self._lock = threading.Lock()

    def __call__(self, p: AddProgress) -> None:
        with self._lock:
            if self.recording:
                self.lines.append((Path(p.file).name, p.status))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    (root / "old").mkdir(parents=True)
    (root / "alpha.md").write_text(report("apricots"))
    (root / "beta.md").write_text(report("bicycles"))
    (root / "gamma.md").write_text(report("glaciers"))
    (root / "old" / "delta.md").write_text(report("dolphins"))
    (root / "notes.csv").write_text("not a document minions reads")
    return root


@pytest.fixture
def watching(folder: Path) -> Iterator[tuple[Library, FolderWatch, Seen]]:
    seen = Seen()
    with Library() as library:
        watch = FolderWatch(library, [folder], on_progress=seen).start()
        assert watch.wait_ready(60), "the watch never finished catching up"
        seen.recording = True
        try:
            yield library, watch, seen
        finally:
            watch.stop()


def test_edits_additions_renames_and_deletions_show_in_search_and_nothing_else_is_read(
    folder: Path, watching: tuple[Library, FolderWatch, Seen]
) -> None:
    library, _, seen = watching
    assert {d.name for d in library.documents} == {"alpha.md", "beta.md", "gamma.md", "delta.md"}

    (folder / "alpha.md").write_text(report("zeppelins"))
    wait_for("the edit of alpha.md", lambda: found_in(library, "zeppelins") == {"alpha.md"})
    assert found_in(library, "apricots") == set()

    (folder / "epsilon.md").write_text(report("emeralds"))
    wait_for("the new epsilon.md", lambda: found_in(library, "emeralds") == {"epsilon.md"})

    (folder / "beta.md").rename(folder / "bravo.md")
    wait_for("beta.md renamed bravo.md", lambda: found_in(library, "bicycles") == {"bravo.md"})
    assert "beta.md" not in {d.name for d in library.documents}

    (folder / "gamma.md").unlink()
    wait_for("gamma.md deleted", lambda: "gamma.md" not in {d.name for d in library.documents})
    assert found_in(library, "glaciers") == set()

    for name in ("alpha.md", "epsilon.md", "bravo.md"):
        assert (name, "added") in seen.lines
    assert {(n, s) for n, s in seen.lines if s == "removed"} == {("beta.md", "removed"), ("gamma.md", "removed")}
    untouched = {"delta.md"}
    assert [line for line in seen.lines if line[0] in untouched or line[1] not in ("added", "removed")] == []


def test_a_file_written_again_unchanged_costs_its_hash_and_is_not_read(
    folder: Path, watching: tuple[Library, FolderWatch, Seen]
) -> None:
    library, watch, seen = watching
    before = {d.name: d.added_at for d in library.documents}
    batches = watch.batches
    (folder / "old" / "delta.md").write_text(report("dolphins"))  # the same bytes again
    wait_for("the rewrite of delta.md to be looked at", lambda: watch.batches > batches)
    assert seen.lines == [("delta.md", "unchanged")]
    assert {d.name: d.added_at for d in library.documents} == before


def test_a_folder_moved_in_or_out_is_added_or_forgotten_whole(
    folder: Path, tmp_path: Path, watching: tuple[Library, FolderWatch, Seen]
) -> None:
    library, _, _ = watching
    (folder / "old").rename(tmp_path / "elsewhere")
    wait_for("the folder moved out", lambda: "delta.md" not in {d.name for d in library.documents})
    (tmp_path / "elsewhere").rename(folder / "back")
    wait_for("the folder moved back in", lambda: found_in(library, "dolphins") == {"delta.md"})


def test_a_file_still_being_written_is_read_once_complete(
    folder: Path, watching: tuple[Library, FolderWatch, Seen]
) -> None:
    library, _, _ = watching
    with (folder / "growing.md").open("w") as f:
        f.write("# Growing\n\n" + FILLER)
        f.flush()
        os.fsync(f.fileno())
        time.sleep(1.5)  # the writer pauses mid-file: the watch may read what is there so far
        f.write("\n\nThe last line names the quetzal.\n")
    wait_for("the completed growing.md", lambda: found_in(library, "quetzal") == {"growing.md"})


def test_what_changed_while_nothing_watched_is_caught_up_first(folder: Path, tmp_path: Path) -> None:
    index = tmp_path / "library"
    with Library(index) as library:
        library.add(folder)
    (folder / "alpha.md").write_text(report("zeppelins"))
    (folder / "gamma.md").unlink()
    (folder / "epsilon.md").write_text(report("emeralds"))
    seen = Seen()
    seen.recording = True
    with Library(index) as library:
        watch = FolderWatch(library, [folder], on_progress=seen).start()
        try:
            assert watch.wait_ready(60)
            assert found_in(library, "zeppelins") == {"alpha.md"} and found_in(library, "emeralds") == {"epsilon.md"}
            assert "gamma.md" not in {d.name for d in library.documents}
        finally:
            watch.stop()
    assert sorted(seen.lines) == sorted(
        [("gamma.md", "removed"), ("alpha.md", "added"), ("beta.md", "unchanged"), ("epsilon.md", "added"),
         ("delta.md", "unchanged")]
    )  # fmt: skip


def test_watch_takes_folders_only(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Library() as library, pytest.raises(DocumentNotFoundError, match="--watch takes folders"):
        FolderWatch(library, [folder / "alpha.md"])
    assert main(["index", "--watch", str(folder / "alpha.md"), "--library", str(folder.parent / "lib")]) == 2
    assert "--watch takes folders" in capsys.readouterr().err


def test_minions_index_watch_prints_a_line_per_file_changed_until_ctrl_c(folder: Path, tmp_path: Path) -> None:
    import queue
    import signal
    import subprocess
    import sys

    command = [sys.executable, "-m", "minions", "index", "--watch", str(folder), "--library", str(tmp_path / "lib")]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr or ()], daemon=True)
    reader.start()

    def line_with(text: str) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                assert process.poll() is None, "minions index --watch exited"
                continue
            if text in line:
                return line
        pytest.fail(f"no line with {text!r}")

    try:
        assert "4 documents; watching" in line_with("watching")
        (folder / "omega.md").write_text(report("ostriches"))
        assert "omega.md  added" in line_with("omega.md")
        (folder / "beta.md").unlink()
        assert "beta.md  removed" in line_with("beta.md")
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
