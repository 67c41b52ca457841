"""Folders that stay in sync with a library: a file added, changed, renamed or deleted under a watched folder is
reflected in the index within seconds.

    watch = FolderWatch(library, ["~/filings"], on_progress=print)
    watch.start()            # a thread: catches up first, then follows the folders' changes
    ...
    watch.stop()

The changes come from the operating system through ``watchfiles`` (inotify, FSEvents, ...), not from a polling
loop of ours. A batch of changes is taken once the folders have been quiet for ``SETTLE_MS``: a file still being
written keeps changing, and is read once it stops (a file written for longer than ``MAX_BATCH_MS`` is read as it
stands, and again when it changes). Each path of a batch is judged by what is there now, not by the kind of change
reported: a rename arrives as a deletion and an addition, and a file written then removed within one batch is
simply gone. Adding goes through ``Library.add``, so a file whose content hash is unchanged costs that hash and
nothing more, and a changed one is read again; and only what really lies inside the watched folders is read (a link
out of them, there from the start or made while watching, is skipped: ``minions.documents.files.contained``).

On start, whatever changed while nothing was watching is caught up first (``FolderWatch.catch_up``: the documents
from under the folders whose files are gone are forgotten, then the folders are added), after the watcher is
listening, so that nothing changed during the catch-up is missed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from minions.documents.files import SUPPORTED_SUFFIXES, contained
from minions.errors import DocumentNotFoundError, MinionsError, OutsideFolderError

from .library import AddProgress, AddReport, Library

__all__ = ["MAX_BATCH_MS", "SETTLE_MS", "FolderWatch", "watched_folders"]

log = logging.getLogger(__name__)

SETTLE_MS = 400
"""A batch of changes is taken once the folders have been quiet this long (``watchfiles``' ``step``)."""
MAX_BATCH_MS = 5000
"""A batch is taken after this long however busy the folders are (``watchfiles``' ``debounce``)."""
_LISTEN_MS = 300
"""How long the watcher listens before the catch-up starts, and how often it checks for the stop."""


def watched_folders(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The folders named, resolved; a DocumentNotFoundError that says what to do for one that is not a folder."""
    folders = []
    for given in paths:
        p = Path(given).expanduser()
        if not p.is_dir():
            raise DocumentNotFoundError(f"{given} is not a folder: --watch takes folders to keep in sync.", path=str(p))
        folders.append(p.resolve())
    return list(dict.fromkeys(folders))


class FolderWatch:
    """Keeps the documents under ``folders`` in ``library`` as the files are: ``run`` (or ``start`` in a thread)
    catches up, then follows the folders' changes until ``stop``. ``on_progress``: one ``AddProgress`` per file
    read, unchanged, skipped or removed (status ``removed``). ``sync``: what brings the index in line with some
    paths under the folders (the folders themselves for the catch-up), for a caller that keeps its own records of
    the documents (the app); left out, ``catch_up`` and ``apply``."""

    def __init__(
        self,
        library: Library,
        folders: Sequence[str | os.PathLike[str]],
        *,
        on_progress: Callable[[AddProgress], None] | None = None,
        sync: Callable[[Sequence[Path]], object] | None = None,
    ) -> None:
        self.library = library
        self.folders = watched_folders(folders)
        self.on_progress = on_progress
        self.sync = sync
        self.ready = threading.Event()
        """Set once the catch-up is done and every change from then on is followed."""
        self.batches = 0
        """Batches of changes applied since the start."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what a change does -------------------------------------------------------------------------------------
    def catch_up(self) -> AddReport:
        """Forget the documents from under the folders whose files are gone (or are now links out of them), then add
        the folders: new and changed files are read, unchanged ones cost their hash."""
        gone = [
            d.name
            for d in self.library.documents
            if self._within(d.key) and not (Path(d.key).is_file() and self._contained(Path(d.key)))
        ]  # gone, or now a link out of the folders
        removed = self._remove(gone)
        report = self.library.add(*self.folders, on_progress=self.on_progress, within=self.folders)
        report.removed = removed
        return report

    def apply(self, paths: Iterable[str | os.PathLike[str]]) -> AddReport:
        """Bring the index in line with ``paths`` (files or folders under the watched folders, as they are now):
        what is gone is forgotten first (so that a rename's new file may take the old name), then what is there is
        added; a folder that appeared is added whole."""
        there, gone = [], []
        for given in sorted({Path(p) for p in paths}):
            if not self._within(str(given)) or _hidden(given, self._root_of(given)):
                continue
            if given.is_dir():
                there.append(given)
            elif given.is_file():
                there += [given] if given.suffix.lower() in SUPPORTED_SUFFIXES else []
                if not self._contained(given):  # now a link out of the folders: what it was is forgotten
                    gone.append(given)
            else:
                gone.append(given)
        removed = self._remove(self._documents_at(gone))
        add = self.library.add
        report = add(*there, on_progress=self.on_progress, within=self.folders) if there else AddReport()
        report.removed = removed
        return report

    def _documents_at(self, paths: Sequence[Path]) -> list[str]:
        """The names of the documents whose file is one of ``paths``, or under one of them (a folder removed)."""
        keys = [str(p) for p in paths]
        return [
            d.name
            for d in self.library.documents
            if any(d.key == k or d.key.startswith(k.rstrip(os.sep) + os.sep) for k in keys)
        ]

    def _remove(self, names: Sequence[str]) -> list[str]:
        removed = self.library.remove(*names)
        for name in removed:
            if self.on_progress is not None:
                self.on_progress(AddProgress(name, 1, 1, 0, 0, 0.0, None, "removed"))
        return removed

    def _contained(self, path: Path) -> bool:
        try:
            contained(path, self.folders)
        except (OutsideFolderError, OSError):
            return False
        return True

    def _within(self, key: str) -> bool:
        return self._root_of(Path(key)) is not None

    def _root_of(self, path: Path) -> Path | None:
        return next((f for f in self.folders if path == f or path.is_relative_to(f)), None)

    # -- following the folders ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Catch up, then apply each batch of changes until ``stop``: a batch that fails is logged, and the watch
        goes on."""
        import watchfiles

        changes = watchfiles.watch(
            *self.folders,
            watch_filter=self._wanted,
            debounce=MAX_BATCH_MS,
            step=SETTLE_MS,
            rust_timeout=_LISTEN_MS,
            yield_on_timeout=True,
            stop_event=self._stop,
            raise_interrupt=False,
        )
        for batch in changes:  # the first comes after _LISTEN_MS at most: the watcher is listening by then
            try:
                if not self.ready.is_set():
                    if self.sync is not None:
                        self.sync(self.folders)
                    else:
                        self.catch_up()
                    self.ready.set()
                if batch:
                    # a folder's own "modified" says only that its listing changed: its files come one by one
                    paths = [Path(p) for c, p in batch if c != watchfiles.Change.modified or not Path(p).is_dir()]
                    if self.sync is not None:
                        self.sync(paths)
                    else:
                        self.apply(paths)
                    self.batches += 1
            except (MinionsError, OSError) as exc:
                log.warning("keeping %s in sync failed (the watch goes on): %s", self.folders[0], exc)

    def start(self) -> FolderWatch:
        """``run`` in a thread of its own; ``ready`` says when the catch-up is done."""
        self._thread = threading.Thread(target=self.run, name="minions-watch", daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait for the catch-up (for at most ``timeout`` seconds); whether it is done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self._thread is not None and not self._thread.is_alive():
                return False
            if deadline is not None and time.monotonic() > deadline:
                return False
        return True

    @property
    def running(self) -> bool:
        """Whether the watch thread is following the folders (or catching up)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop following the folders (a batch being applied is finished first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _wanted(self, change: object, path: str) -> bool:
        """Changes worth a look: not to hidden files or folders, nor to files of unsupported kinds (a folder, or a
        path that is gone and may have been one, is looked at)."""
        p = Path(path)
        if _hidden(p, self._root_of(p)):
            return False
        return not p.suffix or p.suffix.lower() in SUPPORTED_SUFFIXES or p.is_dir()


def _hidden(path: Path, root: Path | None) -> bool:
    """Whether a part of ``path`` below ``root`` starts with a dot (``minions.documents.files.walk`` skips them)."""
    if root is None:
        return False
    return any(part.startswith(".") for part in path.relative_to(root).parts)
