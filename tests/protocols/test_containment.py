"""What a library reads is inside the folders it was given (``minions.documents.files.contained``), whichever way
a file comes in: a folder added, a folder watched (links there from the start, or made while it is watched), and
``minions index`` (``--follow-links`` reads them on purpose)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from minions.apps.cli.main import main
from minions.protocols.library import Library
from minions.protocols.watch import FolderWatch

from .test_watch import found_in, report, wait_for


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``docs/`` with a report about apricots, links out (a file, a folder) and one in; ``outside/`` with a secret
    about walruses."""
    folder, outside = tmp_path / "docs", tmp_path / "outside"
    (folder / "sub").mkdir(parents=True)
    outside.mkdir()
    (folder / "alpha.md").write_text(report("apricots"))
    (folder / "sub" / "inner.md").write_text(report("inkwells"))
    (outside / "secret.md").write_text(report("walruses"))
    os.symlink(outside / "secret.md", folder / "file-link.md")
    os.symlink(outside, folder / "folder-link")
    os.symlink(folder / "sub" / "inner.md", folder / "inside-link.md")
    return folder, outside


def test_a_folder_is_read_only_inside_itself_and_each_link_out_is_skipped_with_its_reason(
    tree: tuple[Path, Path],
) -> None:
    folder, _ = tree
    with Library() as library:
        added = library.add(folder)
        assert found_in(library, "walruses") == set()
        assert found_in(library, "apricots") == {"alpha.md"} and found_in(library, "inkwells")
        skipped = dict(added.skipped)
        assert set(skipped) == {str(folder / "file-link.md"), str(folder / "folder-link")}
        assert all("leads outside the folders that may be read" in why for why in skipped.values())
        dots = library.add(folder / "sub" / ".." / ".." / "outside", within=[folder])  # a server's folders
        assert dots.added == [] and "outside the folders" in dots.skipped[0][1]
        assert library.add(folder / "file-link.md", within=[folder]).added == []
        assert found_in(library, "walruses") == set()
        named = library.add(folder / "file-link.md")  # named on purpose, by itself: read
        assert [d.name for d in named.added] == ["file-link.md"]


def test_a_watched_folder_never_reads_through_a_link_there_from_the_start_or_made_while_watched(
    tree: tuple[Path, Path],
) -> None:
    folder, outside = tree
    (outside / "later.md").write_text(report("narwhals"))
    with Library() as library:
        watch = FolderWatch(library, [folder]).start()
        try:
            assert watch.wait_ready(60), "the watch never finished catching up"
            assert found_in(library, "walruses") == set()
            os.symlink(outside / "later.md", folder / "made-later.md")
            os.symlink(outside, folder / "sub" / "folder-made-later")
            (folder / "alpha.md").unlink()
            os.symlink(outside / "later.md", folder / "alpha.md")  # a file swapped for a link out
            (folder / "omega.md").write_text(report("oranges"))  # a change after them all: they were looked at
            wait_for("the new omega.md", lambda: found_in(library, "oranges") == {"omega.md"})
            wait_for("alpha.md, now a link out, forgotten", lambda: found_in(library, "apricots") == set())
            assert found_in(library, "narwhals") == set() and found_in(library, "walruses") == set()
            names = {d.name for d in library.documents}
            assert "omega.md" in names and not names & {"alpha.md", "made-later.md", "secret.md", "later.md"}
        finally:
            watch.stop()


def test_minions_index_skips_links_out_unless_told_to_follow_them(
    tree: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = tree
    assert main(["index", str(folder), "--library", str(tmp_path / "lib"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert sorted(Path(f).name for f, _ in summary["skipped"]) == ["file-link.md", "folder-link"]
    with Library(tmp_path / "lib") as library:
        assert found_in(library, "walruses") == set()
    assert main(["index", str(folder), "--library", str(tmp_path / "lib"), "--follow-links", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["skipped"] == []
    with Library(tmp_path / "lib") as library:
        assert "file-link.md" in found_in(library, "walruses")
    assert main(["index", "--watch", str(folder), "--library", str(tmp_path / "lib"), "--follow-links"]) == 2


def test_a_file_swapped_for_a_link_out_while_nothing_watched_is_forgotten_at_the_catch_up(
    tree: tuple[Path, Path],
) -> None:
    folder, outside = tree
    with Library() as library:
        library.add(folder)
        assert found_in(library, "apricots") == {"alpha.md"}
        (folder / "alpha.md").unlink()
        os.symlink(outside / "secret.md", folder / "alpha.md")
        report_ = FolderWatch(library, [folder]).catch_up()
        assert report_.removed == ["alpha.md"] and str(folder / "alpha.md") in dict(report_.skipped)
        assert found_in(library, "apricots") == set() and found_in(library, "walruses") == set()
