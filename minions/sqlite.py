"""What the SQLite files of minions share (the app's store, the library's index)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["write_transaction"]


@contextmanager
def write_transaction(db: sqlite3.Connection, lock: threading.Lock | threading.RLock) -> Iterator[sqlite3.Connection]:
    """``db`` (opened with ``isolation_level=None``) in one write transaction under ``lock``: all of it is
    committed, or, when the block raises, none of it."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
