"""The app's documents: the SDK's ``Library`` on the app's library folder, with uploads and the folders the user added.

Nothing the browser sends is trusted as a path or run as code:

- an upload is checked by size, by suffix and by content (a PDF must start like one, a text file must not be
  binary), then stored under the library folder with a generated name; its own name is only a label;
- a folder is a path on this machine that the user typed; only supported files inside it are read, symlinks
  are resolved and anything that resolves outside the folder is skipped (``minions.documents.files.contained``,
  checked again on the file opened, and at every later read of a document's file: an upload only from the
  uploads folder, a folder's file only from its folder; a remembered folder that has become a link is not read).

The library (``protocols.library.Library``) is the one record of the documents: its index (``INDEX_FILE`` in the
app's library folder, by default also the command line's library) keys each document by its file's path, an upload's
by its stored copy's; a document's id in the app's API is made from that key (``document_id``). A question is routed
to the documents it names and ranked there (``Library.sources``), so it reads only those, however many documents
the library holds. This module adds only what a server needs: uploads, remembered folders, limits.

An app folder of the earlier layout (its own index file, ``EARLIER_INDEX_FILE``, keyed by the store's ids, and a
table of documents in the store) is carried into the library when the app first opens it (``carry_over``).

Loading (PDF text extraction) is slow and blocking: the web layer calls these methods in a worker thread; while
a folder is added, ``progress`` says which file it is at.

A folder added through the app is kept in sync while the app runs (``AppDocuments.watch``, through
``protocols.watch.FolderWatch``): a file added, changed (by its hash), renamed or deleted there is reflected
within seconds, and what changed while the app was not running is caught up when it starts. Removing one of a
folder's documents by hand stops keeping that folder in sync, so that the document does not come back.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from minions.documents import Document, load_document
from minions.documents.files import SUPPORTED_SUFFIXES, check_content, walk
from minions.errors import (
    DocumentError,
    DocumentNotFoundError,
    EmptyDocumentError,
    MinionsError,
    UnreadableDocumentError,
)
from minions.protocols.background import resume_embedding
from minions.protocols.library import AddProgress, Library, Sources
from minions.protocols.options import RunOptions
from minions.protocols.search.index import ChunkIndex, IndexedDocument, SqliteIndex
from minions.protocols.search.meaning import EmbedProgress
from minions.protocols.watch import FolderWatch

from .store import DocumentRecord, Store

__all__ = [
    "EARLIER_INDEX_FILE",
    "AppDocuments",
    "FolderReport",
    "UnsupportedUploadError",
    "UploadTooLargeError",
    "check_upload",
    "document_id",
]

log = logging.getLogger(__name__)

EARLIER_INDEX_FILE = "index.sqlite"
"""The app's own index in its library folder before it used the SDK's (keyed by the store's ids): carried over."""
MAX_FOLDER_FILES = 500
"""Most files one "add folder" reads; a folder with more is probably not what the user meant."""
MAX_NAME_CHARS = 120
_LOADED_CACHE = 32
_SNIFF_BYTES = 8192


class UploadTooLargeError(DocumentError):
    pass


class UnsupportedUploadError(UnreadableDocumentError):
    pass


@dataclass
class FolderReport:
    added: list[DocumentRecord] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(file, why) for every file that was not added."""


def document_id(key: str) -> str:
    """A document's id in the app's API: made from its key in the library (its file's path), so it is the same
    at every start."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def clean_name(filename: str) -> str:
    """A display name from a browser's file name: its last path part, printable, not too long."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(c for c in unicodedata.normalize("NFC", base) if c.isprintable()).strip().lstrip(".")
    if len(base) > MAX_NAME_CHARS:
        stem, _, suffix = base.rpartition(".")
        base = stem[: MAX_NAME_CHARS - len(suffix) - 2] + "…." + suffix
    return base or "document"


def check_upload(name: str, head: bytes) -> str:
    """The lower-case suffix of ``name`` if it is a supported one and the file's first bytes match it
    (``minions.documents.files.check_content``); UnsupportedUploadError if not, which the app answers with 415."""
    suffix = Path(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise UnsupportedUploadError(
            f"{name}: unsupported file type {suffix or '(no suffix)'!r}; add a PDF, text, Markdown, HTML or .docx "
            "file.",
            path=name,
        )
    try:
        check_content(name, suffix, head)
    except UnreadableDocumentError as exc:
        raise UnsupportedUploadError(str(exc), path=name) from exc
    return suffix


class AppDocuments:
    """The app's documents: the SDK's ``Library`` on ``root`` (``library``), the uploads stored under it and the
    folders kept in sync (remembered in the store); loaded ``Document`` objects are kept for reuse."""

    def __init__(self, store: Store, root: Path, *, max_bytes: int, options: RunOptions | None = None) -> None:
        self.store = store
        self.uploads = (root / "uploads").resolve()
        self.uploads.mkdir(parents=True, exist_ok=True)
        self.library = Library(root, max_file_bytes=max_bytes)
        """Indexes the documents in an index of another format again when it opens, from their stored text."""
        self.library.options = options or RunOptions()
        self.max_bytes = max_bytes
        self.progress: dict[str, Any] | None = None
        """While a folder is being added: the folder, files done of files_total, the file at hand."""
        self._loaded: OrderedDict[tuple[str, str], Document] = OrderedDict()
        self._lock = threading.Lock()
        self._embedding: threading.Thread | None = None
        self.embed_progress: EmbedProgress | None = None
        """While chunks are being given meaning vectors (in the background, after documents are added)."""
        self._changing = threading.RLock()
        """Held while the app adds or removes documents: the web layer's threads take turns."""
        self._watch: FolderWatch | None = None
        self._watching = False
        """Whether the folders are kept in sync (``watch``); a folder added meanwhile joins them."""
        self.carried = self.carry_over(root)
        """The documents of an app folder of the earlier layout, now in the library."""
        self.library.load_in_background()  # the app's and the API's first question does not wait for it
        resume_embedding(self.library)  # vectors a build left missing (minions index): added meanwhile
        if self.carried:
            self._embed_in_background()

    # -- the documents ------------------------------------------------------------------------------------------
    def records(self) -> list[DocumentRecord]:
        """The library's documents as the app shows them, in the order they were added."""
        docs = sorted(self.library.documents, key=lambda d: (d.added_at, d.name))
        return [self._record(d) for d in docs]

    def _record(self, d: IndexedDocument) -> DocumentRecord:
        source = "upload" if Path(d.key).parent == self.uploads else "folder"
        return DocumentRecord(document_id(d.key), d.name, d.key, source, d.bytes, d.pages, d.chars, d.sha256,
                              d.added_at)  # fmt: skip

    def record(self, doc_id: str) -> DocumentRecord | None:
        return next((r for r in self.records() if r.id == doc_id), None)

    @property
    def index(self) -> ChunkIndex:
        return self.library.index

    # -- adding -----------------------------------------------------------------------------------------------
    def add_upload(self, filename: str, data: bytes) -> DocumentRecord:
        """Check, store and index an upload; on any failure nothing stays behind. The same content again is the
        document that holds it."""
        name = clean_name(filename)
        if len(data) > self.max_bytes:
            raise UploadTooLargeError(f"{name} is larger than the upload limit of {_mb(self.max_bytes)}.", path=name)
        if not data.strip():
            raise EmptyDocumentError(f"{name} is empty: add a file with text in it.", path=name)
        suffix = check_upload(name, data[:_SNIFF_BYTES])
        digest = hashlib.sha256(data).hexdigest()
        with self._changing:
            existing = next((r for r in self.records() if r.sha256 == digest), None)
            if existing is not None:
                return existing
            target = self.uploads / f"{uuid.uuid4().hex}{suffix}"
            target.write_bytes(data)
            try:
                doc = self._load(target, name, [self.uploads])
                indexed = self.library.put(doc, key=str(target), sha256=digest, size=len(data))
            except BaseException:
                target.unlink(missing_ok=True)
                raise
        self._embed_in_background()
        record = self._record(indexed)
        self._remember(record, replace(doc, name=record.name))
        return record

    def add_folder(self, folder: str) -> FolderReport:
        """Add every supported file under ``folder`` (a path on this machine), without leaving it; the folder is
        kept in sync from then on (``watch``)."""
        root = self._folder_root(folder)
        with self._changing:
            report = self._add_files(root)
        if self.store.add_folder(str(root)) and self._watching:
            self.watch()
        return report

    def _add_files(self, root: Path) -> FolderReport:
        """``Library.add`` over the first ``MAX_FOLDER_FILES`` supported files under ``root``, read only inside it;
        a file already in the library (a link to another of its files) is reported as skipped."""
        report = FolderReport()
        found = list(walk(root))
        paths, over = found[:MAX_FOLDER_FILES], found[MAX_FOLDER_FILES:]

        def progress(p: AddProgress) -> None:
            self.progress = {"folder": str(root), "files": p.files, "files_total": p.files_total,
                             "file": _shown(p.file, root), "added": p.files - len(report.skipped)}  # fmt: skip

        try:
            added = self.library.add(*paths, within=[root], embed=False, on_progress=progress)
        finally:
            self.progress = None
        for shown in added.unchanged:
            key = str(Path(shown).resolve())
            same = next((d.name for d in self.library.documents if d.key == key), "another document")
            report.skipped.append((_shown(shown, root), f"already in the library as {same}"))
        report.skipped += [(_shown(file, root), why) for file, why in added.skipped]
        too_many = f"the folder has more than {MAX_FOLDER_FILES} documents"
        report.skipped += [(_shown(str(p), root), too_many) for p in over]
        report.added = [self._record(d) for d in added.added]
        if added.added:
            self._embed_in_background()
        return report

    def _folder_root(self, folder: str) -> Path:
        if not folder.strip():
            raise DocumentNotFoundError("Give the path of a folder on this machine.")
        given = Path(folder.strip()).expanduser()
        if not given.is_absolute():
            raise DocumentNotFoundError(f"{folder!r} is not an absolute path: give the full path of the folder.")
        try:
            root = given.resolve(strict=True)
        except OSError as exc:
            raise DocumentNotFoundError(f"No such folder: {folder}", path=folder) from exc
        if not root.is_dir():
            raise DocumentNotFoundError(f"{folder} is not a folder.", path=folder)
        return root

    def _load(self, path: Path, name: str, within: Sequence[Path]) -> Document:
        return replace(load_document(path, shown=name, within=within), name=name)

    def _roots(self, record: DocumentRecord) -> list[Path]:
        """The folders ``record``'s file may be read from: the uploads folder for an upload; for a folder's file,
        the folders kept in sync that hold it, else (its folder no longer kept in sync) the folder it is in."""
        if record.source == "upload":
            return [self.uploads]
        path = Path(record.path)
        return [Path(f) for f in self._real_folders() if path.is_relative_to(f)] or [path.parent]

    def _real_folders(self) -> list[str]:
        """The folders kept in sync that are still there, and still themselves: one that has become a link since it
        was added (its path stored resolved) is not read, wherever the link leads."""
        real = []
        for folder in self.store.folders():
            if not Path(folder).is_dir():
                log.warning("%s is gone: its documents stay in the library until it is back or removed", folder)
            elif Path(folder).resolve() != Path(folder):
                log.warning("%s has become a link to %s: it is not read", folder, Path(folder).resolve())
            else:
                real.append(folder)
        return real

    def _embed_in_background(self) -> None:
        """Give the new chunks meaning vectors in a thread of their own: a question asked meanwhile is searched by
        words (and meaning where vectors exist already); one thread at a time, which goes on until none is left."""
        if self.library.embedder is None:
            return
        with self._lock:
            if self._embedding is not None and self._embedding.is_alive():
                return
            self._embedding = threading.Thread(target=self._embed, name="minions-embed", daemon=True)
            self._embedding.start()

    def _embed(self) -> None:
        try:
            while self.library.embed(on_progress=self._on_embed):
                pass  # documents added while it ran: their chunks too
        except (MinionsError, OSError, RuntimeError) as exc:  # the text index still answers, by words
            log.warning("embedding the library's chunks failed: %s", exc)
        finally:
            self.embed_progress = None

    def _on_embed(self, progress: EmbedProgress) -> None:
        self.embed_progress = progress

    def search(self, question: str, ids: Sequence[str] | None = None) -> Sources:
        """What ``question`` reads of the documents ``ids`` (None: all): ``Library.sources``, with each document
        read from its file."""
        by_name = {r.name: r for r in self._records(ids)}
        return self.library.sources(question, list(by_name), read=lambda name: self.load(by_name[name]))

    def index_bytes(self) -> dict[str, int]:
        """The text index's disk, shared out among the documents (by id) by their characters."""
        docs = self.index.documents()
        total, chars = self.index.disk_bytes(), sum(d.chars for d in docs) or 1
        return {document_id(d.key): int(total * d.chars / chars) for d in docs}

    # -- using ------------------------------------------------------------------------------------------------
    def documents(self, ids: Sequence[str] | None = None) -> list[Document]:
        """The library's documents (all of them when ``ids`` is None), named as the library names them."""
        return [self.load(r) for r in self._records(ids)]

    def _records(self, ids: Sequence[str] | None) -> list[DocumentRecord]:
        records = self.records()
        if ids is None:
            return records
        by_id = {r.id: r for r in records}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise DocumentNotFoundError(f"No document {missing[0]!r} in the library: it may have been removed.")
        return [by_id[i] for i in ids]

    def resolve_names(self, refs: Sequence[str]) -> list[str]:
        """Document ids for references that are ids or names (the OpenAI route's ``documents`` field)."""
        records = self.records()
        by_name = {r.name: r.id for r in records}
        ids = {r.id for r in records}
        out = []
        for ref in refs:
            if ref in ids:
                out.append(ref)
            elif ref in by_name:
                out.append(by_name[ref])
            else:
                raise DocumentNotFoundError(
                    f"No document {ref!r} in the library: use an id or a name from GET /api/documents.", path=ref
                )
        return out

    def load(self, record: DocumentRecord) -> Document:
        """``record``'s document, read from its file (within the folders it may be read from); a document the
        library holds as text only (``Library.add`` of a ``Document``) from the index."""
        with self._lock:
            if (record.id, record.sha256) in self._loaded:
                self._loaded.move_to_end((record.id, record.sha256))
                return self._loaded[(record.id, record.sha256)]
        if record.path.startswith("document:"):
            doc = self.library.document(record.name)
        else:
            try:
                doc = self._load(Path(record.path), record.name, self._roots(record))
            except DocumentNotFoundError as exc:
                raise DocumentNotFoundError(
                    f"{record.name} is no longer at {record.path}: remove it from the library or put it back.",
                    path=record.path,
                ) from exc
        self._remember(record, doc)
        return doc

    def page_text(self, doc_id: str, page: int) -> str:
        """The text of one page (1-based) of a PDF, or the whole text of a document without pages."""
        record = self.record(doc_id)
        if record is None:
            raise DocumentNotFoundError(f"No document {doc_id!r} in the library.")
        doc = self.load(record)
        if not doc.pages:
            return doc.text
        if not 1 <= page <= len(doc.pages):
            raise DocumentNotFoundError(f"{record.name} has pages 1 to {len(doc.pages)}, not {page}.")
        p = doc.pages[page - 1]
        return doc.text[p.start : p.end]

    def remove(self, doc_id: str) -> DocumentRecord | None:
        """Forget a document; an uploaded file is deleted too, a folder's file never (and its folder is no longer
        kept in sync: the document would come back)."""
        with self._changing:
            record = self.record(doc_id)
            if record is None or not self.library.remove(record.name):
                return None
        with self._lock:
            for cached in [k for k in self._loaded if k[0] == doc_id]:
                del self._loaded[cached]
        if record.source == "upload":
            Path(record.path).unlink(missing_ok=True)
            return record
        watched = [f for f in self.store.folders() if Path(record.path).is_relative_to(f)]
        for folder in watched:
            self.store.remove_folder(folder)
            log.info("%s was removed by hand: %s is no longer kept in sync", record.name, folder)
        if watched and self._watching:
            self.watch()
        return record

    # -- folders kept in sync -----------------------------------------------------------------------------------
    def watch(self) -> None:
        """Keep the folders added through the app in sync (catching up first), in a thread; called again, follow
        the folders as they are now."""
        self.unwatch()
        self._watching = True
        folders = self._real_folders()
        if folders:
            self._watch = FolderWatch(self.library, folders).start()

    def unwatch(self) -> None:
        """Stop keeping the folders in sync."""
        self._watching = False
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the folders are caught up (for at most ``timeout`` seconds); whether they are."""
        return self._watch is None or self._watch.wait_ready(timeout)

    def _remember(self, record: DocumentRecord, doc: Document) -> None:
        with self._lock:
            self._loaded[(record.id, record.sha256)] = doc
            while len(self._loaded) > _LOADED_CACHE:
                self._loaded.popitem(last=False)

    # -- an app folder of the earlier layout --------------------------------------------------------------------
    def carry_over(self, root: Path) -> list[DocumentRecord]:
        """Carry the documents of an app folder of the earlier layout (the store's table of documents, the app's
        own index ``EARLIER_INDEX_FILE`` keyed by their ids) into the library, keyed by their files' paths: from
        the earlier index's stored text where it holds the same content, else from the file; one that neither
        gives is logged and left out. Then the table and the earlier index are dropped: it happens once."""
        earlier = self.store.earlier_documents()
        old_path = root / EARLIER_INDEX_FILE
        if not earlier and not old_path.exists():
            return []
        old = SqliteIndex(old_path) if old_path.exists() else None
        carried = []
        try:
            for r in earlier:
                try:
                    doc = _stored(old, r) or self._load(Path(r.path), r.name, self._roots(r))
                    carried.append(self._record(self.library.put(doc, key=r.path, sha256=r.sha256, size=r.bytes)))
                except (DocumentError, OSError) as exc:
                    log.warning("%s could not be carried into the library: %s", r.name, exc)
        finally:
            if old is not None:
                old.close()
        self.store.forget_earlier_documents()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{old_path}{suffix}").unlink(missing_ok=True)
        log.info("app folder of the earlier layout: %d documents carried into the library", len(carried))
        return carried


def _stored(old: SqliteIndex | None, record: DocumentRecord) -> Document | None:
    """``record``'s text as the earlier index stored it, where it holds the same content; else None."""
    found = old.find(record.id) if old is not None else None
    if found is None or found.sha256 != record.sha256:
        return None
    try:
        return replace(old.document(found.name), name=record.name) if old is not None else None
    except (KeyError, DocumentError, ValueError):
        return None


def _shown(file: str, root: Path) -> str:
    """A file of a folder as the app names it: its path inside the folder."""
    path = Path(file)
    return str(path.relative_to(root)) if path.is_relative_to(root) else file


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:g} MB"
