"""Reading the library ahead of questions: after an upload, the local model computes each chunk's prefix and saves
it (``protocols.chunk_states``), so questions later compute only themselves. The browser shows "reading... 40%",
then "ready".

One worker thread reads the documents one after another, a few chunks per call to the model, so a question asked
meanwhile gets the model between calls: it works before the document is read, just slower. A local model that
keeps no prompt prefixes (anything but the embedded one) has nothing to read ahead: no status is shown.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minions.backends.base import Backend
from minions.documents import Document
from minions.errors import MinionsError
from minions.protocols.chunk_states import ChunkStateProgress, PrefixSaver, save_chunk_states
from minions.protocols.options import RunOptions

__all__ = ["READ_STEP", "Reader", "ReadingStatus"]

log = logging.getLogger(__name__)

READ_STEP = 4
"""Chunks per call to the model while reading ahead: between calls a question gets the model."""


@dataclass(frozen=True, slots=True)
class ReadingStatus:
    state: str
    """queued, reading, ready or failed."""
    percent: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "percent": self.percent, "error": self.error}


Job = tuple[str, Callable[[], Document], Backend, RunOptions]


class Reader:
    """Documents waiting to be read ahead, the one being read, and how far each got."""

    def __init__(self) -> None:
        self._status: dict[str, ReadingStatus] = {}
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, doc_id: str, load: Callable[[], Document], local: Backend, options: RunOptions) -> None:
        """Read ``doc_id`` ahead on ``local`` (nothing to do when it keeps no prefixes)."""
        if not isinstance(local, PrefixSaver):
            return
        with self._lock:
            self._status[doc_id] = ReadingStatus("queued")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="minions-reader", daemon=True)
                self._thread.start()
        self._queue.put((doc_id, load, local, options))

    def status(self, doc_id: str) -> ReadingStatus | None:
        with self._lock:
            return self._status.get(doc_id)

    def forget(self, doc_id: str) -> None:
        with self._lock:
            self._status.pop(doc_id, None)

    def stop(self) -> None:
        self._queue.put(None)

    def wait(self) -> None:
        """Until every queued document is read (tests)."""
        self._queue.join()

    def _set(self, doc_id: str, status: ReadingStatus) -> None:
        with self._lock:
            if doc_id in self._status:  # a document removed meanwhile stays forgotten
                self._status[doc_id] = status

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                self._read(*job)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _read(self, doc_id: str, load: Callable[[], Document], local: Backend, options: RunOptions) -> None:
        if self.status(doc_id) is None:
            return

        def progress(p: ChunkStateProgress) -> None:
            percent = 100 * p.chunks // p.chunks_total if p.chunks_total else 100
            self._set(doc_id, ReadingStatus("ready" if p.finished else "reading", percent))

        self._set(doc_id, ReadingStatus("reading"))
        try:
            save_chunk_states([load()], local, options=options, on_progress=progress, step=READ_STEP)
        except MinionsError as exc:  # the document or the model: said in the library, questions still work
            log.warning("reading %s ahead failed: %s", doc_id, exc)
            self._set(doc_id, ReadingStatus("failed", error=str(exc)))
