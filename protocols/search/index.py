"""The library's text index: every chunk of every document, found by words (BM25 over postings; FTS5 for phrases).

One SQLite file holds, per document, its text (compressed, with pages and sections), its routing profile
(``protocols.search.routing``) and its chunks, each with its document, pages and section. The chunks' terms are
ours (``protocols.search.words.tokenize``: Unicode words, stop words dropped and stemmed in the document's language,
which its profile keeps), the same terms the in-memory ranking uses; a question is made terms in the languages of
the documents it searches. They are kept twice: as postings, which BM25 reads (``protocols.search.postings``, FTS5's
score computed at numpy's speed), and in FTS5, which finds phrases (``phrase_documents``). The figure prior for
quantity questions (``protocols.search.ranking.FIGURE_WEIGHT``) multiplies the best chunks' scores.

    index = SqliteIndex("library.sqlite")
    index.add(doc, chunks, key="/path/10K.pdf", sha256=digest)   # one transaction: all of it or nothing
    index.search("capital expenditure 2018", documents=["3M_2018_10K.pdf"], k=20)   # [Ranked, ...]

A document is added in one transaction, so an interrupted build leaves no half-written entry: the next build
finds the file missing or its hash changed and adds it again. ``ChunkIndex`` is the interface a search server
(OpenSearch, Qdrant, ...) would implement to take this one's place.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from minions.backends.embeddings import EMBEDDINGS_ENV, pinned_name
from minions.chunking import Chunk
from minions.documents import Document, Page, Section
from minions.errors import ConfigError
from minions.sqlite import write_transaction

from .figures import figure_share
from .postings import IDF_FLOOR, Postings, Scores, drop_postings, store_postings
from .postings import SCHEMA as POSTINGS_SCHEMA
from .profiles import GENERAL, Knowledge
from .ranking import FIGURE_CAP, FIGURE_WEIGHT, Ranked, page_spread, search_terms
from .sent import SCHEMA as SENT_SCHEMA
from .sent import SentChunks, load_sent, store_sent
from .vectors import SCHEMA as VECTORS_SCHEMA
from .vectors import VectorMatrix, load_matrix, nearest, similarities, store_vectors, unembedded
from .words import DEFAULT_LANGUAGE, tokenize

__all__ = ["ChunkIndex", "IndexedDocument", "Outdated", "SqliteIndex"]

FORMAT = 3
"""Bump when what is stored changes (the terms, the chunk fields, the routing profile): an index of another format
is emptied, its documents kept aside (``outdated``), and ``Library`` indexes them again from their stored text.
Format 2 (no postings) gains its postings in place (``SqliteIndex._postings_from_terms``)."""
PRIOR_POOL = 300
"""Chunks ranked by words alone that the figure prior re-ranks (``SqliteIndex.search``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    sha256 TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    chars INTEGER NOT NULL,
    chunks INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    profile TEXT NOT NULL,
    body BLOB NOT NULL,
    added_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    pages TEXT NOT NULL,
    section TEXT,
    figures REAL NOT NULL,
    text TEXT NOT NULL,
    terms TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(doc, idx);
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_terms USING fts5(
    terms, doc, content='chunks', content_rowid='id', tokenize="unicode61 remove_diacritics 0 categories 'L* N* Co M*'"
);
CREATE VIRTUAL TABLE IF NOT EXISTS doc_terms USING fts5(
    terms, tokenize="unicode61 remove_diacritics 0 categories 'L* N* Co M*'"
);
CREATE VIRTUAL TABLE IF NOT EXISTS doc_vocab USING fts5vocab(doc_terms, 'row');
"""
_OUTDATED = """CREATE TABLE IF NOT EXISTS outdated (
    name TEXT PRIMARY KEY, key TEXT NOT NULL, sha256 TEXT NOT NULL, bytes INTEGER NOT NULL, body BLOB NOT NULL
)"""


@dataclass(frozen=True)
class IndexedDocument:
    """A document as the index keeps it: enough to list, route and cite it without loading its file."""

    name: str
    key: str
    """Where it came from: the file's resolved path, or its name for a document given as text."""
    sha256: str
    bytes: int
    pages: int
    chars: int
    chunks: int
    added_at: float
    profile: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("name", "key", "bytes", "pages", "chars", "chunks", "profile")}


@dataclass(frozen=True)
class Outdated:
    """A document an index of another format held: what is needed to index it again, its file unread where
    its stored text still loads (``document``; None where it does not, and the file must be read)."""

    name: str
    key: str
    sha256: str
    bytes: int
    document: Document | None


class ChunkIndex(Protocol):
    """What the library needs of an index; ``SqliteIndex`` is the embedded one."""

    path: str
    """Where it is (a file, ":memory:"), for messages."""

    def documents(self) -> list[IndexedDocument]: ...
    def find(self, key: str) -> IndexedDocument | None: ...
    def add(
        self, doc: Document, chunks: Sequence[Chunk], *, key: str, sha256: str, size: int, profile: dict[str, Any]
    ) -> IndexedDocument: ...
    def remove(self, name: str) -> bool: ...
    def document(self, name: str) -> Document: ...
    def search(
        self,
        query: str,
        *,
        question: str | None = None,
        documents: Sequence[str] | None = None,
        k: int = 20,
        names: Sequence[str] = (),
        knowledge: Knowledge = GENERAL,
    ) -> list[Ranked]: ...
    def chunk_count(self, documents: Sequence[str] | None = None) -> int: ...
    def document_frequency(self, terms: Sequence[str]) -> dict[str, int]: ...
    def phrase_documents(self, phrases: Sequence[str], *, before: int | None = None) -> dict[str, list[str]]: ...
    def disk_bytes(self) -> int: ...
    def outdated(self) -> list[Outdated]: ...
    def forget_outdated(self, names: Sequence[str] | None = None) -> None: ...
    def vector_model(self) -> str | None: ...
    def vector_dimension(self) -> int | None: ...
    def use_vector_model(self, name: str) -> None: ...
    def expect_vector_model(self, name: str | None) -> None: ...
    def drop_vectors(self) -> None: ...
    def unembedded(self, limit: int, after: int = 0) -> list[tuple[int, str, str, str | None]]: ...
    def chunks_after(self, after: int, limit: int) -> list[tuple[int, str]]: ...
    def count_after(self, after: int) -> int: ...
    def vector_counts(self) -> dict[str, int]: ...
    def vector_bytes(self) -> tuple[int, int]: ...
    def vector_count(self) -> int: ...
    def add_vectors(self, chunks: Sequence[int], vectors: Any) -> None: ...
    def record_sent(self, rows: Sequence[SentChunks]) -> None: ...
    def sent(self) -> list[SentChunks]: ...
    def meaning_search(self, vector: Any, *, documents: Sequence[str] | None = None, k: int = 20) -> list[Ranked]: ...
    def similarities(self, vector: Any, chunks: Sequence[tuple[str, int]]) -> list[float | None]: ...
    def close(self) -> None: ...


def _appended(
    matrix: VectorMatrix | None, chunks: Sequence[int], vectors: Any, places: Sequence[tuple[int, int, int]]
) -> VectorMatrix | None:
    """``matrix`` with the vectors of ``chunks`` whose (id, document, place) ``places`` holds (the others were
    deleted meanwhile), as ``load_matrix`` would read them (float16, ordered by chunk id)."""
    where = {int(i): (int(d), int(p)) for i, d, p in places}
    keep = [j for j, c in enumerate(chunks) if int(c) in where]
    if not keep:
        return matrix
    ids = np.asarray([int(chunks[j]) for j in keep], dtype=np.int64)
    rows = np.asarray(vectors, dtype=np.float16)[keep].astype(np.float32)
    docs = np.asarray([where[int(i)][0] for i in ids], dtype=np.int64)
    spots = np.asarray([where[int(i)][1] for i in ids], dtype=np.int64)
    if matrix is None:
        return VectorMatrix(ids, docs, spots, rows)
    if len(matrix.chunks) and ids.min() < matrix.chunks[-1]:  # not after the last: sorted again, as read
        both = matrix.appended(ids, docs, spots, rows)
        return both.reordered(np.argsort(both.chunks, kind="stable"))
    return matrix.appended(ids, docs, spots, rows)


def _body(doc: Document) -> bytes:
    data = {
        "text": doc.text,
        "path": doc.path,
        "pages": [[p.number, p.start, p.end] for p in doc.pages],
        "sections": [[s.title, s.start, s.end] for s in doc.sections],
        "metadata": dict(doc.metadata),
    }
    return zlib.compress(json.dumps(data, ensure_ascii=False, default=str).encode(), 6)


def _document(name: str, body: bytes) -> Document:
    data = json.loads(zlib.decompress(body))
    return Document(
        name=name,
        text=data["text"],
        path=data["path"],
        pages=tuple(Page(*p) for p in data["pages"]),
        sections=tuple(Section(*s) for s in data["sections"]),
        metadata=data["metadata"],
    )


def _ranked(row: Sequence[Any], score: float) -> Ranked:
    _, name, idx, text, start, end, pages, section, _ = row
    return Ranked(Chunk(name, idx, text, start, end, tuple(json.loads(pages)), section), score)


class SqliteIndex:
    """The embedded ``ChunkIndex``: one SQLite file (``":memory:"`` for one that lives as long as the object).

    Safe to share between threads: one connection, used under a lock (searches take milliseconds)."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"Cannot create the folder of the library index {self.path}: {exc}") from exc
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL") if self.path != ":memory:" else None
            self._lock = threading.RLock()
            self._writes = 0
            self._documents: tuple[tuple[int, int], list[IndexedDocument]] | None = None
            self._matrix: tuple[tuple[int, int], VectorMatrix | None] | None = None
            self._asking: str | None = None
            self._open()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(
                f"{self.path} is not a library index SQLite can read ({exc}): remove it, or give another path."
            ) from exc

    def _open(self) -> None:
        row = None
        with suppress(sqlite3.OperationalError):  # a new file has no meta table yet
            row = self._db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        if row is not None and row[0] == "2":
            self._postings_from_terms()
        elif row is not None and row[0] != str(FORMAT):
            self._keep_outdated()
            derived = ("chunk_vectors", "postings", "term_chunks", "doc_vocab", "doc_terms", "chunk_terms", "chunks")
            for table in (*derived, "documents", "meta"):
                self._db.execute(f"DROP TABLE IF EXISTS {table}")
            self._db.execute("VACUUM")  # give the old format's pages back to the disk
        self._db.executescript(_SCHEMA)
        self._db.executescript(VECTORS_SCHEMA)
        self._db.executescript(POSTINGS_SCHEMA)
        self._db.executescript(SENT_SCHEMA)  # kept across formats: not derived from the documents
        self._db.execute(_OUTDATED)
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(FORMAT),))

    def _postings_from_terms(self) -> None:
        """An index of format 2 (the same chunks and terms, no postings) given its postings from the terms it
        keeps, its chunks and their vectors left as they are."""
        with self._transaction() as db:
            if db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] != "2":
                return  # another process did it first
            db.execute("ALTER TABLE documents ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0")
            for statement in POSTINGS_SCHEMA.split(";"):
                db.execute(statement)
            for (doc,) in db.execute("SELECT id FROM documents ORDER BY id").fetchall():
                rows = db.execute("SELECT id, terms FROM chunks WHERE doc = ? ORDER BY id", (doc,)).fetchall()
                tokens = store_postings(db, doc, [i for i, _ in rows], [t for _, t in rows])
                db.execute("UPDATE documents SET tokens = ? WHERE id = ?", (tokens, doc))
            db.execute("UPDATE meta SET value = ? WHERE key = 'format'", (str(FORMAT),))

    def _keep_outdated(self) -> None:
        """Before an index of another format is emptied: its documents' rows, in the table ``outdated``."""
        self._db.execute(_OUTDATED)
        with suppress(sqlite3.OperationalError):  # an index from before the documents table
            self._db.execute(
                "INSERT OR REPLACE INTO outdated SELECT name, key, sha256, bytes, body FROM documents ORDER BY id"
            )

    def outdated(self) -> list[Outdated]:
        """The documents that an index of another format held when this one was opened and that are not yet
        indexed again (``Library`` does, and then ``forget_outdated``), each with its stored text where that still
        loads."""
        out = []
        with self._lock:
            rows = self._db.execute("SELECT name, key, sha256, bytes, body FROM outdated ORDER BY rowid").fetchall()
        for name, key, sha256, size, body in rows:
            try:
                doc: Document | None = _document(name, body)
            except (ValueError, KeyError, TypeError, zlib.error):  # the stored text's layout changed too
                doc = None
            out.append(Outdated(name, key, sha256, size, doc))
        return out

    def forget_outdated(self, names: Sequence[str] | None = None) -> None:
        """Drop these outdated documents' rows (None: all of them)."""
        with self._transaction() as db:
            if names is None:
                db.execute("DELETE FROM outdated")
            else:
                db.executemany("DELETE FROM outdated WHERE name = ?", [(n,) for n in names])

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, write_transaction(self._db, self._lock) as db:
            self._writes += 1
            yield db

    # -- what is in it ------------------------------------------------------------------------------------------
    _COLUMNS = "name, key, sha256, bytes, pages, chars, chunks, added_at, profile"

    def _record(self, row: Sequence[Any]) -> IndexedDocument:
        name, key, sha256, size, pages, chars, chunks, added_at, profile = row
        return IndexedDocument(name, key, sha256, size, pages, chars, chunks, added_at, json.loads(profile))

    def documents(self) -> list[IndexedDocument]:
        """Every document, in the order added; read again only after a change, this connection's or another's
        (SQLite's ``data_version``), since a question reads them all to route."""
        with self._lock:
            version = (self._writes, self._db.execute("PRAGMA data_version").fetchone()[0])
            if self._documents is None or self._documents[0] != version:
                rows = self._db.execute(f"SELECT {self._COLUMNS} FROM documents ORDER BY id").fetchall()
                self._documents = (version, [self._record(r) for r in rows])
            return list(self._documents[1])

    def find(self, key: str) -> IndexedDocument | None:
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLUMNS} FROM documents WHERE key = ?", (key,)).fetchone()
        return self._record(row) if row else None

    def document(self, name: str) -> Document:
        with self._lock:
            row = self._db.execute("SELECT body FROM documents WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise KeyError(name)
        return _document(name, row[0])

    def chunk_count(self, documents: Sequence[str] | None = None) -> int:
        with self._lock:
            if documents is None:
                return int(self._db.execute("SELECT COALESCE(SUM(chunks), 0) FROM documents").fetchone()[0])
            marks = ",".join("?" * len(documents))
            sql = f"SELECT COALESCE(SUM(chunks), 0) FROM documents WHERE name IN ({marks})"
            return int(self._db.execute(sql, list(documents)).fetchone()[0])

    def document_frequency(self, terms: Sequence[str]) -> dict[str, int]:
        """How many documents hold each of ``terms`` anywhere (terms in none are left out)."""
        wanted = list(dict.fromkeys(terms))
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        with self._lock:
            rows = self._db.execute(f"SELECT term, doc FROM doc_vocab WHERE term IN ({marks})", wanted).fetchall()
        return {term: int(n) for term, n in rows}

    def phrase_documents(self, phrases: Sequence[str], *, before: int | None = None) -> dict[str, list[str]]:
        """The documents that hold each of ``phrases`` (our terms, space-separated: "best buy") side by side in
        one chunk (``before``: in a chunk that starts in their first ``before`` characters, their cover); phrases
        in none are left out."""
        sql = (
            "SELECT DISTINCT d.name FROM chunk_terms JOIN chunks c ON c.id = chunk_terms.rowid "
            "JOIN documents d ON d.id = c.doc WHERE chunk_terms MATCH ? AND c.start < ? ORDER BY d.name"
        )
        out = {}
        with self._lock:
            for phrase in dict.fromkeys(phrases):
                quoted = " + ".join(f'"{t}"' for t in phrase.split())
                rows = self._db.execute(sql, (f"terms : ({quoted})", before if before is not None else 2**62))
                if names := [n for (n,) in rows]:
                    out[phrase] = names
        return out

    def disk_bytes(self) -> int:
        if self.path == ":memory:":
            return 0
        return sum(p.stat().st_size for p in Path(self.path).parent.glob(Path(self.path).name + "*") if p.is_file())

    # -- changing it --------------------------------------------------------------------------------------------
    def add(
        self, doc: Document, chunks: Sequence[Chunk], *, key: str, sha256: str, size: int, profile: dict[str, Any]
    ) -> IndexedDocument:
        """Add ``doc`` and its ``chunks`` (replacing what ``key`` held before), in one transaction; their terms are
        made in ``profile``'s language."""
        language = (str(profile.get("language") or DEFAULT_LANGUAGE),)
        rows = [
            (
                c.index,
                c.start,
                c.end,
                json.dumps(list(c.pages)),
                c.section,
                min(figure_share(c.text), FIGURE_CAP),
                c.text,
                " ".join(tokenize(c.text, language)),
            )
            for c in chunks
        ]
        with self._transaction() as db:
            self._delete(db, "key = ?", key)
            self._delete(db, "name = ?", doc.name)
            cur = db.execute(
                "INSERT INTO documents (key, name, sha256, bytes, pages, chars, chunks, tokens, profile, body, "
                "added_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)",
                (key, doc.name, sha256, size, len(doc.pages), len(doc.text), len(chunks), json.dumps(profile),
                 _body(doc), time.time()),
            )  # fmt: skip
            doc_id = cur.lastrowid
            assert doc_id is not None
            vocabulary = sorted({t for row in rows for t in row[-1].split()})
            db.execute("INSERT INTO doc_terms (rowid, terms) VALUES (?, ?)", (doc_id, " ".join(vocabulary)))
            ids: list[int] = []
            for row in rows:
                cur = db.execute(
                    "INSERT INTO chunks (doc, idx, start, end, pages, section, figures, text, terms) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (doc_id, *row),
                )
                ids.append(int(cur.lastrowid or 0))
                db.execute(
                    "INSERT INTO chunk_terms (rowid, terms, doc) VALUES (?, ?, ?)", (cur.lastrowid, row[-1], doc_id)
                )
            tokens = store_postings(db, doc_id, ids, [row[-1] for row in rows])
            db.execute("UPDATE documents SET tokens = ? WHERE id = ?", (tokens, doc_id))
        found = self.find(key)
        assert found is not None
        return found

    def remove(self, name: str) -> bool:
        """Forget the document called ``name``; whether there was one."""
        with self._transaction() as db:
            return self._delete(db, "name = ?", name)

    def _delete(self, db: sqlite3.Connection, where: str, value: str) -> bool:
        row = db.execute(f"SELECT id FROM documents WHERE {where}", (value,)).fetchone()
        if row is None:
            return False
        db.execute(
            "INSERT INTO chunk_terms (chunk_terms, rowid, terms, doc) "
            "SELECT 'delete', id, terms, doc FROM chunks WHERE doc = ?",
            (row[0],),
        )
        db.execute("DELETE FROM chunks WHERE doc = ?", (row[0],))
        vocabulary = db.execute("SELECT terms FROM doc_terms WHERE rowid = ?", (row[0],)).fetchone()
        drop_postings(db, row[0], vocabulary[0].split() if vocabulary else ())
        db.execute("DELETE FROM doc_terms WHERE rowid = ?", (row[0],))
        db.execute("DELETE FROM documents WHERE id = ?", (row[0],))
        return True

    # -- searching ----------------------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        question: str | None = None,
        documents: Sequence[str] | None = None,
        k: int = 20,
        names: Sequence[str] = (),
        knowledge: Knowledge = GENERAL,
    ) -> list[Ranked]:
        """The ``k`` chunks that rank best for ``query`` (BM25 over our terms in ``knowledge``'s languages and what
        its glossary adds, ``ranking.search_terms``, times the figure prior when ``question``, default the query,
        asks for a quantity), among ``documents`` (names; None: all), best first, pages spread
        (``ranking.spread_pages``); ties keep the chunks' order. ``names``: terms that named ``documents``
        (``routing.Route.names``), each weighed by how many of their chunks hold it, as a search of those documents
        alone would weigh it (a company's name is rare in the library and in most chunks of its own filings: weighed
        by the library, it ranks first the chunks that say the name most, an exhibit list, a subsidiary's)."""
        expression = search_terms(query, question, knowledge)
        terms = list(dict.fromkeys(tokenize(expression, knowledge.languages)))
        if not terms or k <= 0:
            return []
        weight = FIGURE_WEIGHT if knowledge.asks_for_quantity(question if question is not None else query) else 0.0
        with self._lock:
            ids = None
            if documents is not None:
                ids = self._ids(documents)
                if not ids:
                    return []
            named = [t for t in dict.fromkeys(names) if t in terms] if ids is not None else []
            found = Postings(self._db).scores(terms, documents=ids, apart=named)
            # the figure prior re-ranks the best PRIOR_POOL by words (it multiplies a score by at most
            # 1 + FIGURE_WEIGHT/2), and a page's second chunk makes way for other pages' best, so twice k at least
            pool = max(2 * k, PRIOR_POOL) if weight else 2 * k
            hits = found.best(pool)
            if not hits:
                return []
            surplus = self._names_surplus(hits, found, ids) if named and ids is not None else {}
            # the pool's places and figures only (no text): the k kept are read whole below
            marks = ",".join("?" * len(hits))
            places = {
                r[0]: r[1:]
                for r in self._db.execute(
                    f"SELECT id, doc, pages, figures FROM chunks WHERE id IN ({marks})", [h[0] for h in hits]
                )
            }
            scored = [
                (score * (1 + weight * places[i][2]) - surplus.get(i, 0.0), i) for i, score in hits if i in places
            ]
            scored.sort(key=lambda item: (-item[0], item[1]))
            firsts = [places[i][1].strip("[]").partition(",")[0] for _, i in scored]  # pages: JSON "[3, 4]"
            pages = [(places[i][0], first) if first else None for (_, i), first in zip(scored, firsts, strict=True)]
            kept = [scored[j] for j in page_spread(pages)[:k]]
            return self._read_ranked([(i, score) for score, i in kept])

    def _names_surplus(self, hits: Sequence[tuple[int, float]], found: Scores, ids: Sequence[int]) -> dict[int, float]:
        """What each of the chunks ``hits`` scores for the terms ``found`` kept apart beyond what those terms would
        score among the chunks of documents ``ids`` alone (call under the lock). A term's part of a BM25 score is
        its idf times its frequency part, so the surplus is that part times one less the idf within over the
        library's. The idf within is the one-document ranking's (``bm25.BM25``: a name in most chunks still
        counts a little; FTS5's own, which is nil there, gave FinanceBench library recall@10 0.836 against 0.840
        in a probe). The surplus is taken off after the figure prior (0.832 against 0.820 before it)."""
        marks = ",".join("?" * len(ids))
        within = int(
            self._db.execute(
                f"SELECT COALESCE(SUM(chunks), 0) FROM documents WHERE id IN ({marks})", list(ids)
            ).fetchone()[0]
        )
        wanted = {i for i, _ in hits}
        surplus: dict[int, float] = {}
        for chunks, parts, idf_library in found.parts.values():
            idf = max(idf_library, IDF_FLOOR)  # never under the floor, as before (the scores' floor is FTS5's)
            idf_within = math.log(1 + (within - len(chunks) + 0.5) / (len(chunks) + 0.5))
            for i, part in zip(chunks.tolist(), parts.tolist(), strict=True):
                if i in wanted:
                    surplus[i] = surplus.get(i, 0.0) + part * (1 - idf_within / idf)
        return surplus

    def _read_ranked(self, scored: Sequence[tuple[int, float]]) -> list[Ranked]:
        """The chunks of ids ``scored`` (id, score) read whole, in that order, each with its score (call under
        the lock)."""
        marks = ",".join("?" * len(scored))
        rows = self._db.execute(
            "SELECT c.id, d.name, c.idx, c.text, c.start, c.end, c.pages, c.section, c.figures "
            f"FROM chunks c JOIN documents d ON d.id = c.doc WHERE c.id IN ({marks})",
            [i for i, _ in scored],
        ).fetchall()
        by_id = {r[0]: r for r in rows}
        return [_ranked(by_id[i], score) for i, score in scored if i in by_id]

    def _ids(self, names: Sequence[str]) -> list[int]:
        marks = ",".join("?" * len(names))
        rows = self._db.execute(f"SELECT id FROM documents WHERE name IN ({marks})", list(names)).fetchall()
        return [r[0] for r in rows]

    # -- meaning ------------------------------------------------------------------------------------------------
    def vector_model(self) -> str | None:
        """The embedding model the stored vectors are of (None: none chosen yet), as ``vector_model_of`` names it."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
        return pinned_name(row[0]) if row else None

    def vector_dimension(self) -> int | None:
        """The stored vectors' length (None: none stored yet)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'embedder_dim'").fetchone()
        return int(row[0]) if row else None

    def use_vector_model(self, name: str) -> None:
        """Vectors from now on are ``name``'s: those of another model are dropped (they are not comparable)."""
        if self.vector_model() == name:
            return
        with self._transaction() as db:
            db.execute("DELETE FROM chunk_vectors")
            db.execute("DELETE FROM meta WHERE key = 'embedder_dim'")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embedder', ?)", (name,))
            self._matrix = None

    def drop_vectors(self) -> None:
        """Forget every stored vector (``minions index --reembed``: computed again, by the model now named)."""
        with self._transaction() as db:
            db.execute("DELETE FROM chunk_vectors")
            db.execute("DELETE FROM meta WHERE key IN ('embedder', 'embedder_dim')")
            self._matrix = None

    def expect_vector_model(self, name: str | None) -> None:
        """Questions are embedded by ``name`` from now on: a meaning search refuses them, with what to do, while
        the stored vectors are another model's (None: no check)."""
        self._asking = name

    def _check_model(self, vector: Any, matrix: VectorMatrix) -> None:
        """Refuse a question's ``vector`` that is not of ``matrix``'s model or length (call under the lock)."""
        stored, dimension = self.vector_model(), int(matrix.rows.shape[1])
        other = self._asking is not None and stored is not None and stored != self._asking
        if other or getattr(vector, "shape", (dimension,))[-1] != dimension:
            asked = self._asking or "another model"
            raise ConfigError(
                f"The library {self.path} holds meaning vectors of {stored} ({dimension} dimensions); this question "
                f"is embedded by {asked}. Re-embed the library with it (minions index --reembed, or Library.embed"
                f"(again=True)), or ask with {EMBEDDINGS_ENV} naming {stored}."
            )

    def unembedded(self, limit: int, after: int = 0) -> list[tuple[int, str, str, str | None]]:
        """Up to ``limit`` chunks after chunk id ``after`` without a vector: (chunk id, document, text, section)."""
        with self._lock:
            return unembedded(self._db, limit, after)

    def chunks_after(self, after: int, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` chunks after chunk id ``after``, in index order: (chunk id, text)."""
        with self._lock:
            rows = self._db.execute("SELECT id, text FROM chunks WHERE id > ? ORDER BY id LIMIT ?", (after, limit))
            return [(int(i), str(t)) for i, t in rows]

    def count_after(self, after: int) -> int:
        """How many chunks come after chunk id ``after``."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM chunks WHERE id > ?", (after,)).fetchone()[0])

    def vector_counts(self) -> dict[str, int]:
        """How many of each document's chunks have a vector."""
        with self._lock:
            rows = self._db.execute(
                "SELECT d.name, COUNT(v.chunk) FROM documents d JOIN chunks c ON c.doc = d.id "
                "LEFT JOIN chunk_vectors v ON v.chunk = c.id GROUP BY d.id"
            ).fetchall()
        return {name: int(n) for name, n in rows}

    def vector_bytes(self) -> tuple[int, int]:
        """How many chunks have a vector, and the bytes the vectors take (inside ``disk_bytes``)."""
        with self._lock:
            n, size = self._db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(vec)), 0) FROM chunk_vectors").fetchone()
        return int(n), int(size)

    def add_vectors(self, chunks: Sequence[int], vectors: Any) -> None:
        """Keep ``vectors`` (one row a chunk of ``chunks``, of the model ``use_vector_model`` named); the first
        fix the vectors' length, which later ones must have."""
        if len(chunks) == 0:
            return
        width = int(vectors.shape[1])
        dimension = self.vector_dimension()
        if dimension is not None and width != dimension:
            raise ConfigError(
                f"These vectors have {width} dimensions; the library {self.path} holds vectors of {dimension} "
                f"({self.vector_model()}): re-embed it (minions index --reembed) to change models."
            )
        with self._lock:
            current = self._matrix is not None and self._matrix[0] == self._version()
            with self._transaction() as db:
                store_vectors(db, chunks, vectors)
                if dimension is None:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('embedder_dim', ?)", (str(width),))
                places = db.execute(
                    f"SELECT id, doc, idx FROM chunks WHERE id IN ({','.join('?' * len(chunks))})",
                    [int(c) for c in chunks],
                ).fetchall()
            if current and self._matrix is not None:  # appended in memory: no question waits for a reload
                self._matrix = (self._version(), _appended(self._matrix[1], chunks, vectors, places))

    def _version(self) -> tuple[int, int]:
        """Changes so far, this connection's and another's (SQLite's ``data_version``; call under the lock)."""
        return (self._writes, self._db.execute("PRAGMA data_version").fetchone()[0])

    def record_sent(self, rows: Sequence[SentChunks]) -> None:
        """Log chunks sent to an embedding model on another machine (``search.sent``)."""
        with self._transaction() as db:
            store_sent(db, rows)

    def sent(self) -> list[SentChunks]:
        """The log of chunks sent off the device to be embedded, oldest first."""
        with self._lock:
            return load_sent(self._db)

    def _vectors(self) -> VectorMatrix | None:
        """The stored vectors as one matrix, read again only after a change other than vectors added here (those
        are appended to it: ``add_vectors``; call under the lock)."""
        version = self._version()
        if self._matrix is None or self._matrix[0] != version:
            self._matrix = (version, load_matrix(self._db))
        return self._matrix[1]

    def vector_count(self) -> int:
        """How many chunks have a vector, from the matrix a search reads anyway (``vector_bytes`` scans the
        table: 100 ms or more at 343,000 vectors, on every question)."""
        with self._lock:
            matrix = self._vectors()
            return 0 if matrix is None else len(matrix.chunks)

    def meaning_search(self, vector: Any, *, documents: Sequence[str] | None = None, k: int = 20) -> list[Ranked]:
        """The ``k`` chunks (of ``documents``; None: all) whose meaning is closest to ``vector`` (a question's, of
        the stored vectors' model), best first, each scored by its cosine similarity."""
        with self._lock:
            matrix = self._vectors()
            if matrix is None:
                return []
            self._check_model(vector, matrix)
            ids = self._ids(documents) if documents is not None else None
            found = nearest(matrix, vector, ids, k)
            return self._read_ranked(found) if found else []

    def similarities(self, vector: Any, chunks: Sequence[tuple[str, int]]) -> list[float | None]:
        """The cosine of ``vector`` to each of ``chunks`` (document name, place), None where one has no vector."""
        with self._lock:
            matrix = self._vectors()
            if matrix is None:
                return [None] * len(chunks)
            self._check_model(vector, matrix)
            names = sorted({name for name, _ in chunks})
            marks = ",".join("?" * len(names))
            ids = dict(self._db.execute(f"SELECT name, id FROM documents WHERE name IN ({marks})", names).fetchall())
        return similarities(matrix, vector, [(ids.get(name, -1), place) for name, place in chunks])

    def close(self) -> None:
        with self._lock:
            self._db.close()
