"""What a library sent off the device to an embedding model on another machine, as records.

Chunks embedded while indexing are the library's own egress: a row of ``embeddings_sent`` in its index file for
each document in each request (when, which document, the model and where it is, how many chunks, their bytes as
sent, the tokens and the price: a request's tokens and price shared out among its documents by their bytes), kept
across format changes (the log is not derived from the documents), and shown by ``minions cache`` and the app. A
question's embedding is egress of the run that asks it: ``question_egress`` makes its requests records of the
run's egress log (step ``embed``), the same type every other byte that leaves is recorded as.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from minions.backends.embeddings import EmbeddingRequest

from ..result import EMBED_STEP, EgressRecord, RunResult

__all__ = [
    "SCHEMA",
    "SentChunks",
    "load_sent",
    "question_egress",
    "sent_by_document",
    "sent_summary",
    "store_sent",
    "with_egress",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings_sent (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    document TEXT NOT NULL,
    backend TEXT NOT NULL,
    host TEXT,
    chunks INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    usd REAL NOT NULL
);
"""


@dataclass(frozen=True)
class SentChunks:
    """One document's chunks in one request to an embedding model on another machine."""

    at: float
    """When (seconds since the epoch)."""
    document: str
    backend: str
    host: str | None
    chunks: int
    bytes: int
    """The bytes of text sent (UTF-8), each chunk as sent (with its header)."""
    tokens: int
    usd: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sent_by_document(requests: Sequence[EmbeddingRequest], documents: Sequence[str]) -> list[SentChunks]:
    """``requests`` (sent in order for texts whose documents are ``documents``, one a text) as rows, one per
    document per request; a request's tokens and price are shared out by bytes (the shares add up to them)."""
    rows: list[SentChunks] = []
    start, now = 0, time.time()
    for request in requests:
        owners = documents[start : start + len(request.texts)]
        start += len(request.texts)
        sizes: dict[str, list[int]] = {}
        for owner, text in zip(owners, request.texts, strict=True):
            sizes.setdefault(owner, []).append(len(text.encode("utf-8")))
        tokens_left, usd_left = request.tokens, request.usd
        for n, (document, each) in enumerate(sizes.items(), start=1):
            share = sum(each) / request.bytes if request.bytes else 0.0
            last = n == len(sizes)
            tokens = tokens_left if last else round(request.tokens * share)
            usd = usd_left if last else request.usd * share
            tokens_left, usd_left = tokens_left - tokens, usd_left - usd
            rows.append(SentChunks(now, document, request.backend, request.host, len(each), sum(each), tokens, usd))
    return rows


def store_sent(db: sqlite3.Connection, rows: Sequence[SentChunks]) -> None:
    db.executemany(
        "INSERT INTO embeddings_sent (at, document, backend, host, chunks, bytes, tokens, usd) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(r.at, r.document, r.backend, r.host, r.chunks, r.bytes, r.tokens, r.usd) for r in rows],
    )


def load_sent(db: sqlite3.Connection) -> list[SentChunks]:
    rows = db.execute(
        "SELECT at, document, backend, host, chunks, bytes, tokens, usd FROM embeddings_sent ORDER BY id"
    ).fetchall()
    return [SentChunks(*row) for row in rows]


def sent_summary(rows: Sequence[SentChunks]) -> dict[str, Any]:
    """The log in all (bytes, tokens, price, where to) and by document, with its rows, as JSON-ready values."""
    per: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = per.setdefault(r.document, {"document": r.document, "chunks": 0, "bytes": 0, "tokens": 0, "usd": 0.0})
        d["chunks"], d["bytes"], d["tokens"] = d["chunks"] + r.chunks, d["bytes"] + r.bytes, d["tokens"] + r.tokens
        d["usd"] += r.usd
    return {
        "bytes": sum(r.bytes for r in rows),
        "tokens": sum(r.tokens for r in rows),
        "usd": sum(r.usd for r in rows),
        "to": sorted({r.host or r.backend for r in rows}),
        "per_document": list(per.values()),
        "log": [r.to_dict() for r in rows],
    }


def question_egress(requests: Sequence[EmbeddingRequest]) -> tuple[EgressRecord, ...]:
    """A question's embedding requests as records of its run's egress (round 0: before the protocol's first)."""
    return tuple(
        EgressRecord(0, EMBED_STEP, r.backend, "\n".join(r.texts), r.host, bytes=r.bytes, tokens=r.tokens, usd=r.usd)
        for r in requests
    )


def with_egress(result: RunResult, records: Sequence[EgressRecord]) -> RunResult:
    """``result`` with ``records`` (what left before its protocol ran) first in its egress."""
    if not records:
        return result
    return replace(result, egress=(*records, *result.egress))
