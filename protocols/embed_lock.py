"""One embedding of a library's chunks at a time, across processes: ``EmbeddingLock``, an exclusive ``flock`` on
``INDEX-embedding.pid`` beside the index (the holder's pid written in it). The kernel lets it go when its process
ends however it ends, so a crashed build never leaves a stale lock, and a library is being embedded exactly while
one holds it. ``Library.embed`` takes it; the background process (``protocols.background``) is handed it locked.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import IO, ClassVar

__all__ = ["LOCK_SUFFIX", "LOG_SUFFIX", "EmbeddingLock", "lock_path", "log_path"]

LOCK_SUFFIX = "-embedding.pid"
"""Beside the index (``library.sqlite-embedding.pid``): locked while a process embeds the library's chunks."""
LOG_SUFFIX = "-embedding.log"
"""Beside the index: what the background process said (its last run's), read by ``--status`` when it failed."""


def lock_path(index_path: str) -> Path:
    return Path(index_path + LOCK_SUFFIX)


def log_path(index_path: str) -> Path:
    return Path(index_path + LOG_SUFFIX)


class EmbeddingLock:
    """The one embedding of the library whose index is at ``index_path``: ``acquire`` takes an exclusive ``flock``
    on ``lock_path`` (waiting for it, or not), and writes this process's pid there. Re-entrant within a thread (the
    background process holds it around ``Library.embed``, which takes it too); two threads or two processes take
    turns."""

    _held: ClassVar[dict[tuple[str, int], tuple[IO[str], int]]] = {}
    _guard = threading.Lock()

    def __init__(self, index_path: str) -> None:
        self.path = lock_path(index_path)
        self._key = (str(self.path), 0)

    def acquire(self, *, wait: bool = True) -> bool:
        import fcntl

        key = (str(self.path), threading.get_ident())
        with self._guard:
            if key in self._held:
                file, depth = self._held[key]
                self._held[key] = (file, depth + 1)
                self._key = key
                return True
        file = self.path.open("a+", encoding="ascii")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            file.close()
            return False
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        with self._guard:
            self._held[key] = (file, 1)
        self._key = key
        return True

    def adopt(self, fd: int) -> None:
        """Hold the lock through ``fd``, a descriptor of the lock file locked by the process that started this one
        (the lock is the open file's, shared across the exec: no moment in between when it looks free)."""
        key = (str(self.path), threading.get_ident())
        with self._guard:
            self._held[key] = (os.fdopen(fd, "a+", encoding="ascii"), 1)
        self._key = key

    def handed_on(self, pid: int) -> int:
        """The descriptor to hand to process ``pid`` (``adopt``), whose pid the lock file now names (held)."""
        file, _ = self._held[self._key]
        file.truncate(0)
        file.write(f"{pid}\n")
        file.flush()
        return file.fileno()

    def release(self) -> None:
        with self._guard:
            file, depth = self._held.pop(self._key)
            if depth > 1:
                self._held[self._key] = (file, depth - 1)
                return
        file.close()  # closing the last descriptor lets the flock go

    def __enter__(self) -> EmbeddingLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def holder(self) -> int | None:
        """The pid of the process embedding now (None: none is)."""
        if not self.path.exists():
            return None
        if self.acquire(wait=False):
            self.release()
            return None
        try:
            return int(self.path.read_text(encoding="ascii").split()[0])
        except (OSError, ValueError, IndexError):  # written a moment after the lock is taken
            return -1
