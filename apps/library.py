"""The app's document library: uploads and local folders become documents the app can ask about.

Nothing the browser sends is trusted as a path or run as code:

- an upload is checked by size, by suffix and by content (a PDF must start like one, a text file must not be
  binary), then stored under the library folder with a generated name; its own name is only a label;
- a folder is a path on this machine that the user typed; only supported files inside it are read, symlinks
  are resolved and anything that resolves outside the folder is skipped (``minions.documents.files.contained``,
  checked again on the file opened, and at every later read of a document's file: an upload only from the
  uploads folder, a folder's file only from its folder; a remembered folder that has become a link is not read).

The store keeps what the app knows of a document (its name, its file, where it came from); the SDK's library
(``protocols.library.Library``) indexes it under the store's id and answers the searches: a question is
routed to the documents it names and ranked there by words (``Library.sources``), so it reads only those, however
many documents the library holds. The app only adds what a server needs: uploads, folders, limits.

The index is ``APP_INDEX_FILE`` in the app's library folder, not the SDK's ``protocols.library.INDEX_FILE``:
by default that folder is also the command line's library (``minions index``), and the two index their documents
under different keys (store ids, file paths), so one file would let each replace the other's documents of the same
name.

Loading (PDF text extraction) is slow and blocking: the web layer calls these methods in a worker thread; while
a folder is added, ``progress`` says which file it is at.

A folder added through the app is kept in sync while the app runs (``AppLibrary.watch``, through
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
from minions.documents.files import SUPPORTED_SUFFIXES, check_content, contained, read_contained, sha256_file, walk
from minions.errors import (
    DocumentError,
    DocumentNotFoundError,
    EmptyDocumentError,
    MinionsError,
    UnreadableDocumentError,
)
from minions.protocols.library import Library, Sources
from minions.protocols.options import RunOptions
from minions.protocols.search.index import ChunkIndex
from minions.protocols.search.meaning import EmbedProgress
from minions.protocols.watch import FolderWatch

from .store import DocumentRecord, Store

__all__ = [
    "APP_INDEX_FILE",
    "AppLibrary",
    "FolderReport",
    "UnsupportedUploadError",
    "UploadTooLargeError",
    "check_upload",
]

log = logging.getLogger(__name__)

APP_INDEX_FILE = "index.sqlite"
"""The app's text index, in its library folder (why not the SDK's name: the module's docstring)."""
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


class AppLibrary:
    """The app's documents: their rows in the store, their files, and the SDK's ``Library`` that indexes them
    under the store's ids; loaded ``Document`` objects are kept for reuse."""

    def __init__(self, store: Store, root: Path, *, max_bytes: int, options: RunOptions | None = None) -> None:
        self.store = store
        self.uploads = (root / "uploads").resolve()
        self.uploads.mkdir(parents=True, exist_ok=True)
        self.library = Library(root / APP_INDEX_FILE)
        """Indexes the documents in an index of another format again when it opens, from their stored text; a
        document it cannot is indexed again from its file at the next search."""
        self.library.options = options or RunOptions()
        self.library.load_in_background()  # the app's and the API's first question does not wait for it
        self.max_bytes = max_bytes
        self.progress: dict[str, Any] | None = None
        """While a folder is being added: the folder, files done of files_total, the file at hand."""
        self._loaded: OrderedDict[str, Document] = OrderedDict()
        self._lock = threading.Lock()
        self._embedding: threading.Thread | None = None
        self.embed_progress: EmbedProgress | None = None
        """While chunks are being given meaning vectors (in the background, after documents are added)."""
        self._changing = threading.RLock()
        """Held while documents are added or removed: the web layer's threads and the folder watch take turns."""
        self._watch: FolderWatch | None = None
        self._watching = False
        """Whether the folders are kept in sync (``watch``); a folder added meanwhile joins them."""

    # -- adding -----------------------------------------------------------------------------------------------
    def add_upload(self, filename: str, data: bytes) -> DocumentRecord:
        """Check, store and load an upload; on any failure nothing stays behind."""
        name = clean_name(filename)
        if len(data) > self.max_bytes:
            raise UploadTooLargeError(f"{name} is larger than the upload limit of {_mb(self.max_bytes)}.", path=name)
        if not data.strip():
            raise EmptyDocumentError(f"{name} is empty: add a file with text in it.", path=name)
        suffix = check_upload(name, data[:_SNIFF_BYTES])
        digest = hashlib.sha256(data).hexdigest()
        existing = self.store.find_document(sha256=digest)
        if existing is not None:
            return existing
        target = self.uploads / f"{uuid.uuid4().hex}{suffix}"
        target.write_bytes(data)
        try:
            doc = self._load(target, name, [self.uploads])
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return self._register(doc, name, target, "upload", len(data), digest)

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
        report = FolderReport()
        paths = _walk(root, report)
        for n, path in enumerate(paths):
            shown = str(path.relative_to(root))
            self.progress = {"folder": str(root), "files": n, "files_total": len(paths), "file": shown,
                             "added": len(report.added), "skipped": len(report.skipped)}  # fmt: skip
            try:
                real = contained(path, [root])
                if not real.is_file():
                    raise UnsupportedUploadError(f"{shown} is not a regular file", path=shown)
                existing = self.store.find_document(path=str(real))
                if existing is not None:
                    report.skipped.append((shown, f"already in the library as {existing.name}"))
                    continue
                size = real.stat().st_size
                if size > self.max_bytes:
                    raise UploadTooLargeError(f"{shown} is larger than {_mb(self.max_bytes)}", path=shown)
                data = read_contained(real, [root])
                check_upload(path.name, data[:_SNIFF_BYTES])
                digest = hashlib.sha256(data).hexdigest()
                doc = self._load(real, path.name, [root])
                report.added.append(self._register(doc, path.name, real, "folder", size, digest))
            except (DocumentError, OSError) as exc:
                report.skipped.append((shown, str(exc)))
        self.progress = None
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

    def _register(self, doc: Document, name: str, path: Path, source: str, size: int, digest: str) -> DocumentRecord:
        record = self.store.add_document(
            name=name,
            path=str(path),
            source=source,
            size=size,
            pages=len(doc.pages),
            chars=len(doc.text),
            sha256=digest,
        )
        named = replace(doc, name=record.name)
        try:
            self._index(record, named)
        except BaseException:
            self.store.remove_document(record.id)
            raise
        self._remember(record.id, named)
        return record

    def _index(self, record: DocumentRecord, doc: Document) -> None:
        self.library.put(doc, key=record.id, sha256=record.sha256, size=record.bytes)
        self._embed_in_background()

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

    @property
    def index(self) -> ChunkIndex:
        return self.library.index

    def search(self, question: str, ids: Sequence[str] | None = None) -> Sources:
        """What ``question`` reads of the documents ``ids`` (None: all): ``Library.sources``, with each document
        read from its file; a document the index does not hold yet (a library from before the index) is indexed
        first."""
        records = self._records(ids)
        indexed = {d.key for d in self.index.documents()}
        for r in records:
            if r.id not in indexed:
                self._index(r, self.load(r))
        by_name = {r.name: r for r in records}
        return self.library.sources(question, list(by_name), read=lambda name: self.load(by_name[name]))

    def index_bytes(self) -> dict[str, int]:
        """The text index's disk, shared out among the documents by their characters."""
        docs = self.index.documents()
        total, chars = self.index.disk_bytes(), sum(d.chars for d in docs) or 1
        return {d.key: int(total * d.chars / chars) for d in docs}

    # -- using ------------------------------------------------------------------------------------------------
    def documents(self, ids: Sequence[str] | None = None) -> list[Document]:
        """The library's documents (all of them when ``ids`` is None), named as the library names them."""
        return [self.load(r) for r in self._records(ids)]

    def _records(self, ids: Sequence[str] | None) -> list[DocumentRecord]:
        records = self.store.documents()
        if ids is None:
            return records
        by_id = {r.id: r for r in records}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise DocumentNotFoundError(f"No document {missing[0]!r} in the library: it may have been removed.")
        return [by_id[i] for i in ids]

    def resolve_names(self, refs: Sequence[str]) -> list[str]:
        """Document ids for references that are ids or names (the OpenAI route's ``documents`` field)."""
        records = self.store.documents()
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
        with self._lock:
            if record.id in self._loaded:
                self._loaded.move_to_end(record.id)
                return self._loaded[record.id]
        try:
            doc = self._load(Path(record.path), record.name, self._roots(record))
        except DocumentNotFoundError as exc:
            raise DocumentNotFoundError(
                f"{record.name} is no longer at {record.path}: remove it from the library or put it back.",
                path=record.path,
            ) from exc
        self._remember(record.id, doc)
        return doc

    def page_text(self, doc_id: str, page: int) -> str:
        """The text of one page (1-based) of a PDF, or the whole text of a document without pages."""
        record = self.store.document(doc_id)
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
        record = self._forget(doc_id)
        if record is not None and record.source == "folder":
            watched = [f for f in self.store.folders() if Path(record.path).is_relative_to(f)]
            for folder in watched:
                self.store.remove_folder(folder)
                log.info("%s was removed by hand: %s is no longer kept in sync", record.name, folder)
            if watched and self._watching:
                self.watch()
        return record

    def _forget(self, doc_id: str) -> DocumentRecord | None:
        with self._changing:
            record = self.store.remove_document(doc_id)
            if record is None:
                return None
            self.library.remove(record.name)
        with self._lock:
            self._loaded.pop(doc_id, None)
        if record.source == "upload" and Path(record.path).parent == self.uploads:
            Path(record.path).unlink(missing_ok=True)
        return record

    # -- folders kept in sync -----------------------------------------------------------------------------------
    def watch(self) -> None:
        """Keep the folders added through the app in sync (catching up first), in a thread; called again, follow
        the folders as they are now."""
        self.unwatch()
        self._watching = True
        folders = self._real_folders()
        if folders:
            self._watch = FolderWatch(self.library, folders, sync=self.sync).start()

    def unwatch(self) -> None:
        """Stop keeping the folders in sync."""
        self._watching = False
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the folders are caught up (for at most ``timeout`` seconds); whether they are."""
        return self._watch is None or self._watch.wait_ready(timeout)

    def sync(self, paths: Sequence[Path]) -> list[FolderReport]:
        """Bring the documents in line with ``paths`` (files or folders under the folders kept in sync): each
        folder they are in is synced (``sync_folder``)."""
        roots = sorted({Path(f) for f in self._real_folders() for p in paths if Path(p).is_relative_to(f)})
        return [self.sync_folder(root) for root in roots]

    def sync_folder(self, root: Path) -> FolderReport:
        """Bring the documents from under ``root`` in line with its files: those whose file is gone or changed
        (its SHA-256) are forgotten, then new and changed files are added; an unchanged file costs its hash."""
        with self._changing:
            for r in self.store.documents():
                path = Path(r.path)
                within = r.source == "folder" and path.is_relative_to(root)
                if within and (not path.is_file() or sha256_file(path) != r.sha256):
                    self._forget(r.id)
                    log.info("%s changed or is gone: forgotten", r.name)
            report = self._add_files(root) if root.is_dir() else FolderReport()
        for record in report.added:
            log.info("%s added from %s", record.name, root)
        return report

    def _remember(self, doc_id: str, doc: Document) -> None:
        with self._lock:
            self._loaded[doc_id] = doc
            while len(self._loaded) > _LOADED_CACHE:
                self._loaded.popitem(last=False)


def _walk(root: Path, report: FolderReport) -> list[Path]:
    """The supported files under ``root`` (``minions.documents.files.walk``), the first ``MAX_FOLDER_FILES`` of
    them; the others are reported as skipped."""
    found = list(walk(root))
    for path in found[MAX_FOLDER_FILES:]:
        report.skipped.append((str(path.relative_to(root)), f"the folder has more than {MAX_FOLDER_FILES} documents"))
    return found[:MAX_FOLDER_FILES]


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:g} MB"
