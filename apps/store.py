"""What the app keeps across restarts, in one SQLite file: the conversations with their messages (each answer with
its full run record), the settings and the folders kept in sync. The documents are the library's
(``apps.documents``); an app folder of the earlier layout kept them here too, in a table read once, to carry them over.

One connection, shared by the server's threads under a lock: the app writes a few rows per question, so a
pool would buy nothing. Every write commits at once, so a crash loses at most the run in flight.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from minions.sqlite import write_transaction

__all__ = ["ConversationRecord", "DocumentRecord", "MessageRecord", "MessageStatus", "Store"]

MessageStatus = Literal["ok", "partial", "cancelled", "error"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    status TEXT NOT NULL,
    meta TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS folders (path TEXT PRIMARY KEY, added_at REAL NOT NULL);
"""


@dataclass(frozen=True)
class DocumentRecord:
    """A document as the app's API shows it (``apps.documents.AppDocuments.records``, from the library's index)."""

    id: str
    name: str
    """Unique in the library; what citations and the remote planner call the document."""
    path: str
    """The file on this machine (its key in the library): a generated name under the library for uploads, the real
    path for folders."""
    source: str
    """``upload`` or ``folder``."""
    bytes: int
    pages: int
    chars: int
    sha256: str
    added_at: float

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["path"]  # the browser has no use for paths on the server
        return d


@dataclass(frozen=True)
class ConversationRecord:
    id: str
    title: str
    created_at: float
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MessageRecord:
    id: int
    conversation_id: str
    role: str
    content: str
    status: str
    meta: Mapping[str, Any]
    """For answers: the run (``RunResult.to_dict()``), the models, the protocol and the documents used."""
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "meta": dict(self.meta)}


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db, self._lock)

    def _all(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._db.execute(sql, args))

    # -- the documents of an app folder of the earlier layout ----------------------------------------------------
    def earlier_documents(self) -> list[DocumentRecord]:
        """The documents an app folder of the earlier layout kept here (its ``documents`` table), to be carried into
        the library; none in a store of today's layout."""
        if not self._all("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'documents'"):
            return []
        return [DocumentRecord(**dict(r)) for r in self._all("SELECT * FROM documents ORDER BY added_at, name")]

    def forget_earlier_documents(self) -> None:
        """Drop the earlier layout's ``documents`` table, once its documents are in the library."""
        with self._tx() as db:
            db.execute("DROP TABLE IF EXISTS documents")

    # -- folders kept in sync -------------------------------------------------------------------------------
    def folders(self) -> list[str]:
        """The folders added through the app, which it keeps in sync, in the order they were added."""
        return [r["path"] for r in self._all("SELECT path FROM folders ORDER BY added_at, path")]

    def add_folder(self, path: str) -> bool:
        """Remember a folder to keep in sync; whether it is new."""
        with self._tx() as db:
            return db.execute("INSERT OR IGNORE INTO folders VALUES (?, ?)", (path, time.time())).rowcount > 0

    def remove_folder(self, path: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM folders WHERE path = ?", (path,))

    # -- conversations --------------------------------------------------------------------------------------
    def new_conversation(self, title: str = "New conversation") -> ConversationRecord:
        now = time.time()
        record = ConversationRecord(uuid.uuid4().hex[:12], title, now, now)
        with self._tx() as db:
            db.execute("INSERT INTO conversations VALUES (?, ?, ?, ?)", tuple(asdict(record).values()))
        return record

    def conversations(self) -> list[ConversationRecord]:
        rows = self._all("SELECT * FROM conversations ORDER BY updated_at DESC")
        return [ConversationRecord(**dict(r)) for r in rows]

    def conversation(self, conversation_id: str) -> ConversationRecord | None:
        rows = self._all("SELECT * FROM conversations WHERE id = ?", conversation_id)
        return ConversationRecord(**dict(rows[0])) if rows else None

    def delete_conversation(self, conversation_id: str) -> bool:
        with self._tx() as db:
            return db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0

    def add_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        *,
        status: MessageStatus = "ok",
        meta: Mapping[str, Any] | None = None,
    ) -> MessageRecord:
        """Append a message; the first question also names the conversation."""
        now = time.time()
        encoded = json.dumps(dict(meta or {}), ensure_ascii=False, default=str)
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO messages (conversation_id, role, content, status, meta, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, status, encoded, now),
            )
            db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
            if role == "user":
                db.execute(
                    "UPDATE conversations SET title = ? WHERE id = ? AND title = 'New conversation'",
                    (_title(content), conversation_id),
                )
        return MessageRecord(int(cur.lastrowid or 0), conversation_id, role, content, status, dict(meta or {}), now)

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        rows = self._all("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", conversation_id)
        return [MessageRecord(**{**dict(r), "meta": json.loads(r["meta"])}) for r in rows]

    # -- settings -------------------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        return {r["key"]: json.loads(r["value"]) for r in self._all("SELECT key, value FROM settings")}

    def save_settings(self, values: Mapping[str, Any]) -> None:
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO settings VALUES (?, ?)", [(k, json.dumps(v)) for k, v in values.items()]
            )


def _title(question: str) -> str:
    words = " ".join(question.split())
    return words if len(words) <= 60 else words[:59].rstrip() + "…"
