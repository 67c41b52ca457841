"""A library: documents kept in an index on disk, asked about together.

    library = Library("~/filings")                 # a folder for the index (or a .sqlite file; None: memory)
    library.add("~/Downloads/filings/")            # files and folders; seconds a document, text only
    library.ask("What was 3M's FY2018 capital expenditure?").answer

Adding a file reads its text once (``minions.documents``), cuts it into chunks as the protocols do
(``RunOptions``), and stores text, chunks and a routing profile in the index (``protocols.search.index``), keyed by
the file's path and checked by its content's hash: a file added again unchanged costs a hash, a changed one is
replaced, ``refresh`` re-reads what changed and drops what is gone. A file that cannot be read is listed with
its reason and the others go on. The local model is not needed for any of it: its chunk states are saved when a
question reads a chunk (``warm=True`` computes them all ahead, ``protocols.chunk_states``).

A question is ranked in one place, ``protocols.search.rank`` (route, words, meaning, repeats: a route is evidence,
not a wall, so a wrong one costs places, not the answer); the protocol reads the best (``RunOptions.read_chunks``)
and ``RunResult.reading["library"]`` says which documents were considered and why.

The library sits on the protocols' top floor, above ``search/`` (what searches) and the protocols it runs
(``factory``); ``watch`` keeps folders in sync with it, ``chunk_states`` computes its chunks' states ahead.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from minions.backends.base import Backend
from minions.backends.embeddings import Embedder, embeddings_sent, resolve_embedder, vector_model_of
from minions.backends.registry import default_local, resolve
from minions.chunking import chunk_documents
from minions.documents import Document, load_document
from minions.documents.files import contained, linked_folders, read_contained, sha256_file, walk
from minions.errors import ConfigError, DocumentError, OutsideFolderError

from .chunk_states import ChunkStateProgress, PrefixSaver, save_chunk_states
from .embed_lock import EmbeddingLock
from .factory import get_protocol
from .options import RunOptions, default_protocol
from .result import EgressRecord, RunResult
from .search.index import ChunkIndex, IndexedDocument, Outdated, SqliteIndex
from .search.meaning import EmbedProgress, embed_missing
from .search.profiles import Glossary
from .search.rank import RANK_DEPTH, LibrarySearch, search_library
from .search.ranking import Ranking
from .search.routing import profile
from .search.sent import question_egress, with_egress
from .search.sentence_vectors import keep_sentences

__all__ = [
    "GLOSSARY_FILE",
    "INDEX_FILE",
    "AddProgress",
    "AddReport",
    "Library",
    "Sources",
]

log = logging.getLogger(__name__)

INDEX_FILE = "library.sqlite"
"""The index's file name inside a library folder."""
GLOSSARY_FILE = "glossary.json"
"""A user's glossary beside the index (``search.profiles.Glossary.load``): read when the library is opened."""


@dataclass(frozen=True, slots=True)
class AddProgress:
    """Where adding stands, after each file."""

    file: str
    files: int
    files_total: int
    pages: int
    """Pages read so far (all files)."""
    chunks: int
    elapsed_s: float
    eta_s: float | None
    status: str
    """added, unchanged or skipped (with ``why``)."""
    why: str | None = None


@dataclass
class AddReport:
    added: list[IndexedDocument] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(file, why) for every file that could not be added."""
    seconds: float = 0.0
    embedded: int = 0
    """Chunks given a meaning vector."""
    embed_seconds: float = 0.0

    def summary(self) -> str:
        parts = [f"{len(self.added)} added", f"{len(self.unchanged)} unchanged"]
        parts += [f"{len(self.removed)} removed"] if self.removed else []
        parts += [f"{len(self.skipped)} skipped"] if self.skipped else []
        embedded = f"; {self.embedded} chunks embedded in {self.embed_seconds:.1f} s" if self.embedded else ""
        return ", ".join(parts) + f" in {self.seconds:.1f} s" + embedded


@dataclass(frozen=True)
class Sources:
    """What a question over a library reads: the documents its search led to, and the chunks it ranked (what
    a protocol's ``run`` takes as ``ranking``)."""

    documents: list[Document]
    ranking: Ranking | None = None
    egress: tuple[EgressRecord, ...] = ()
    """What the search sent off the device: the question, to an embedding model on another machine
    (``search.sent.question_egress``); a run adds it to its own (``search.sent.with_egress``)."""


def _index_path(path: str | os.PathLike[str] | None) -> str:
    if path is None:
        return ":memory:"
    p = Path(path).expanduser()
    return str(p if p.suffix in (".sqlite", ".sqlite3", ".db") else p / INDEX_FILE)


def _files(
    paths: Iterable[str | os.PathLike[str]],
    report: AddReport,
    within: Sequence[str | os.PathLike[str]] | None = None,
    follow_links: bool = False,
) -> list[tuple[Path, list[Path] | None]]:
    """The files named, and the supported files under the folders named (``minions.documents.files.walk``), in
    order, each with the folders it may be read from (``contained``): ``within`` where given (a server's folders),
    else the folder walked, or a file named by itself; None (any) with ``follow_links``. A link to a folder that
    leads out of it is reported as skipped; a folder named outside ``within`` is skipped whole."""
    out: dict[Path, list[Path] | None] = {}
    allowed = [Path(w).expanduser().resolve() for w in within] if within is not None else None
    for given in paths:
        p = Path(given).expanduser()
        try:
            if allowed is not None:
                contained(p, allowed)
            if p.is_dir():
                roots = allowed or (None if follow_links else [p.resolve()])
                out.update((f, roots) for f in walk(p, follow_links=follow_links and allowed is None))
                for link in linked_folders(p) if roots is not None else []:
                    _skip_outside(link, roots or [], report)
            elif p.exists():
                out[p] = allowed or (None if follow_links else [p])
            else:
                report.skipped.append((str(given), f"no such file or folder: {given}"))
        except OutsideFolderError as exc:
            report.skipped.append((exc.path or str(given), str(exc)))
    return list(out.items())


def _skip_outside(link: Path, roots: list[Path], report: AddReport) -> None:
    """Report a link to a folder that leads out of ``roots`` as skipped (one to a folder inside is not entered:
    its files are walked where they really are)."""
    try:
        contained(link, roots)
    except OutsideFolderError as exc:
        report.skipped.append((str(link), str(exc)))
    except FileNotFoundError:  # a broken link: nothing to read
        pass


class Library:
    """Documents in an index on disk (``path``: a folder or a ``.sqlite`` file; None: kept in memory), asked
    about together. ``local``/``remote``/``protocol``/``options`` are those of the protocols; the models load at
    the first question, not before. ``max_file_bytes``: a larger file is skipped, with the reason (a server's
    limit; None: any size)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        local: Backend | str | None = None,
        remote: Backend | str | None = None,
        *,
        protocol: str | None = None,
        index: ChunkIndex | None = None,
        embeddings: str | Embedder | None = None,
        allow_egress: bool = False,
        glossary: str | os.PathLike[str] | Mapping[str, str] | Glossary | None = None,
        max_file_bytes: int | None = None,
        **options: Any,
    ) -> None:
        self.max_file_bytes = max_file_bytes
        self._naming = threading.Lock()
        """Held while a document is named and stored: two threads (a server's requests, a folder watch) adding at
        once never give two documents one name."""
        self.index = index if index is not None else SqliteIndex(_index_path(path))
        beside = Path(self.index.path).parent / GLOSSARY_FILE if self.index.path != ":memory:" else None
        self.glossary = Glossary.load(glossary if glossary is not None or beside is None or not beside.is_file()
                                      else beside)  # fmt: skip
        """A user's glossary (pattern -> words added to a question that names it): ``glossary``, else the file
        ``GLOSSARY_FILE`` beside the index, else none."""
        self.embedding_spec = embeddings if isinstance(embeddings, str) else "" if embeddings is None else None
        """How a background process names the embedding model again (``background.resume_embedding``): the spec given,
        "" for the default ($MINIONS_EMBEDDINGS, else auto), None for an embedder object (it cannot)."""
        self.allow_egress = allow_egress
        self.embedder = resolve_embedder(embeddings, allow_egress=allow_egress)
        """The model that gives each chunk a meaning vector (``backends.embeddings``; "auto" by default, None: the
        library searches by words alone). A question's meaning search is refused while the index holds another
        model's vectors (``embed(again=True)`` replaces them)."""
        self.index.expect_vector_model(vector_model_of(self.embedder) if self.embedder is not None else None)
        self.options = RunOptions.from_kwargs(dict(options))
        self._models = (local, remote, protocol, options)
        self._protocol: Any = None
        self.carried = self._index_again(self.index.outdated())
        """What an index of an older format held, indexed again when it was opened (``AddReport``)."""

    def _index_again(self, outdated: Sequence[Outdated]) -> AddReport:
        """Index again the documents an index of another format held: from their stored text, or where that no
        longer loads, from their file; a document neither gives back is listed as skipped, with the reason."""
        report = AddReport()
        started = time.perf_counter()
        for old in outdated:
            try:
                doc = old.document or self._read_again(old)
                report.added.append(self.put(doc, key=old.key, sha256=old.sha256, size=old.bytes))
            except (DocumentError, OSError) as exc:
                report.skipped.append((old.name, str(exc)))
            self.index.forget_outdated([old.name])
        report.seconds = time.perf_counter() - started
        if outdated:
            log.info("library index of an older format: %d documents indexed again in %.1f s",
                     len(report.added), report.seconds)  # fmt: skip
        for name, why in report.skipped:
            log.warning("library: %s could not be indexed again after a format change: %s", name, why)
        return report

    @staticmethod
    def _read_again(old: Outdated) -> Document:
        path = Path(old.key)
        if path.is_symlink() or not path.is_file() or sha256_file(path) != old.sha256:
            raise DocumentError(f"its stored text is of an older layout, and {old.key} is gone or has changed")
        return replace(load_document(path, within=[path.parent]), name=old.name)

    # -- the documents ------------------------------------------------------------------------------------------
    @property
    def documents(self) -> list[IndexedDocument]:
        return self.index.documents()

    def add(
        self,
        *paths: str | os.PathLike[str] | Document,
        on_progress: Callable[[AddProgress], None] | None = None,
        warm: bool = False,
        on_warm: Callable[[ChunkStateProgress], None] | None = None,
        embed: bool = True,
        on_embed: Callable[[EmbedProgress], None] | None = None,
        within: Sequence[str | os.PathLike[str]] | None = None,
        follow_links: bool = False,
    ) -> AddReport:
        """Add files, the supported files of folders, or loaded documents; files already in the index unchanged
        are left as they are. Their text is indexed first (searchable by words at once); then, with ``embed``
        and an embedding model, every chunk without a meaning vector gets one (``embed``). ``warm``: also compute
        and save every new chunk's state on the local model. A file is read only where it really is inside the
        folder named (``minions.documents.files.contained``: a link out of it is skipped, with the reason), or
        inside ``within`` (the folders a server may read); ``follow_links``: links are followed anywhere (the
        command line's ``--follow-links``, never a server's)."""
        report = AddReport()
        started = time.perf_counter()
        given = [p for p in paths if isinstance(p, Document)]
        files = _files([p for p in paths if not isinstance(p, Document)], report, within, follow_links)
        total, pages, chunks = len(files) + len(given), 0, 0
        items: list[Path | Document] = [*given, *(f for f, _ in files)]
        roots = dict(files)
        for n, item in enumerate(items, start=1):
            shown = item.name if isinstance(item, Document) else str(item)
            status, why = "added", None
            try:
                added = self._add_one(item, roots.get(item) if isinstance(item, Path) else None)
            except (DocumentError, OSError) as exc:
                status, why = "skipped", str(exc)
                report.skipped.append((shown, why))
            else:
                if added is None:
                    status = "unchanged"
                    report.unchanged.append(shown)
                else:
                    report.added.append(added)
                    pages, chunks = pages + added.pages, chunks + added.chunks
            if on_progress is not None:
                elapsed = time.perf_counter() - started
                eta = elapsed / n * (total - n)
                on_progress(AddProgress(shown, n, total, pages, chunks, elapsed, eta, status, why))
        report.seconds = time.perf_counter() - started
        if embed:
            embedding = time.perf_counter()
            report.embedded = self.embed(on_progress=on_embed)
            report.embed_seconds = time.perf_counter() - embedding
        if warm and report.added:
            self.warm([d.name for d in report.added], on_progress=on_warm)
        return report

    def load_in_background(self) -> threading.Thread | None:
        """Load the embedding model in a thread of its own (a server calls it when it starts: its first question
        then does not wait seconds for the load); the thread, None without a model or for a model on a server
        (nothing to load here, and a warm-up request would send text off the device). A failed load is logged and
        left for the first question to meet and say."""
        embedder = self.embedder
        if embedder is None or embedder.address is not None:
            return None

        def load() -> None:
            try:
                embedder.embed(["a question"], query=True)
            except Exception as exc:  # the first search meets it again and reports it where a user sees it
                log.warning("the embedding model %s did not load: %s", embedder.name, exc)

        thread = threading.Thread(target=load, name="minions-embedder-load", daemon=True)
        thread.start()
        return thread

    def embed(self, on_progress: Callable[[EmbedProgress], None] | None = None, *, again: bool = False) -> int:
        """Give every chunk that has none a meaning vector, in batches (stopped, it goes on where it stopped next
        time); the number embedded (0 without an embedding model). ``again``: every stored vector is dropped
        first and computed again (``minions index --reembed``: after a change of model). Vectors of another model
        than this library's embedder are dropped in any case: a library's vectors are one model's."""
        if self.embedder is None and not again:
            return 0
        with self._embedding():
            return self._embed(on_progress, again)

    def _embed(self, on_progress: Callable[[EmbedProgress], None] | None, again: bool) -> int:
        if again:
            self.index.drop_vectors()
        if self.embedder is None:
            return 0
        return embed_missing(self.index, self.embedder, on_progress=on_progress)

    def keep_sentences(self, on_progress: Callable[[EmbedProgress], None] | None = None) -> int:
        """Embed every chunk's sentences ahead of the questions, which then do not wait for them (the background
        process does it after the chunks' vectors: ``search.sentence_vectors``); the number of chunks done (0
        without an embedding model on this device). Stopped, it goes on where it stopped next time."""
        if self.embedder is None:
            return 0
        with self._embedding():
            return keep_sentences(self.index, self.embedder, on_progress=on_progress)

    @contextmanager
    def _embedding(self) -> Iterator[None]:
        """The library's one embedding at a time (``EmbeddingLock``), waited for where another process holds it;
        a library in memory is this process's alone."""
        if self.index.path == ":memory:":
            yield
            return
        lock = EmbeddingLock(self.index.path)
        if not lock.acquire(wait=False):
            log.info("another process is embedding %s: waiting for it", self.index.path)
            lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def _add_one(self, item: Path | Document, roots: list[Path] | None = None) -> IndexedDocument | None:
        if isinstance(item, Document):
            data = item.text.encode("utf-8", "surrogatepass")
            key, digest, doc = f"document:{item.name}", hashlib.sha256(data).hexdigest(), item
            found = self.index.find(key)
            if found is not None and found.sha256 == digest:
                return None
            return self.put(doc, key=key, sha256=digest, size=len(data))
        key = str(item.resolve() if roots is None else contained(item, roots))
        if self.max_file_bytes is not None and Path(key).stat().st_size > self.max_file_bytes:
            raise DocumentError(f"{item} is larger than {self.max_file_bytes / 1024 / 1024:g} MB", path=str(item))
        digest = sha256_file(item) if roots is None else hashlib.sha256(read_contained(item, roots)).hexdigest()
        found = self.index.find(key)
        if found is not None and found.sha256 == digest:
            return None
        doc = load_document(item, within=roots)
        return self.put(doc, key=key, sha256=digest, size=item.stat().st_size)

    def put(self, doc: Document, *, key: str, sha256: str, size: int) -> IndexedDocument:
        """Chunk ``doc`` as the protocols do, profile it for routing, and index it under ``key`` (one transaction;
        what ``key`` held before is replaced), named ``doc.name``, or ``stem (2).suffix`` ... where another document
        of the library has that name. ``add`` keys a file by its path; the app's uploads are keyed by their stored
        copy's path, under the name they were uploaded with."""
        with self._naming:
            name = self._free_name(doc.name, self.index.find(key))
            named = doc if name == doc.name else replace(doc, name=name)
            o = self.options
            chunks = chunk_documents([named], by=o.chunk_by, size=o.chunk_size, overlap=o.overlap)
            return self.index.add(named, chunks, key=key, sha256=sha256, size=size, profile=profile(named, len(chunks)))

    def _free_name(self, name: str, replacing: IndexedDocument | None) -> str:
        """``name``, or ``stem (2).suffix`` ... when another file of the library has it."""
        taken = {d.name for d in self.index.documents()} - ({replacing.name} if replacing else set())
        if name not in taken:
            return name
        stem, dot, suffix = name.rpartition(".")
        stem, dot, suffix = (stem, dot, suffix) if dot else (name, "", "")
        return next(f"{stem} ({i}){dot}{suffix}" for i in range(2, len(taken) + 3) if f"{stem} ({i}){dot}{suffix}"
                    not in taken)  # fmt: skip

    def refresh(self, on_progress: Callable[[AddProgress], None] | None = None) -> AddReport:
        """Read again the files that changed since they were added; forget those that are gone."""
        report = AddReport()
        files = []
        for d in self.index.documents():
            if d.key.startswith("document:"):
                continue
            if Path(d.key).is_file():
                files.append(d.key)
            else:
                self.index.remove(d.name)
                report.removed.append(d.name)
        again = self.add(*files, on_progress=on_progress)
        again.removed = report.removed
        return again

    def remove(self, *names: str) -> list[str]:
        """Forget documents by name; the names that were there."""
        return [n for n in names if self.index.remove(n)]

    def document(self, name: str) -> Document:
        try:
            return self.index.document(name)
        except KeyError:
            known = ", ".join(d.name for d in self.index.documents()[:10]) or "none"
            raise ConfigError(f"No document {name!r} in the library (documents: {known}).") from None

    def disk_bytes(self) -> int:
        return self.index.disk_bytes()

    # -- questions ----------------------------------------------------------------------------------------------
    @property
    def protocol(self) -> Any:
        if self._protocol is None:
            local, remote, name, options = self._models
            backend = resolve(local or default_local()) if not isinstance(local, Backend) else local
            remote_backend = resolve(remote) if isinstance(remote, str) else remote
            self._protocol = get_protocol(
                name or default_protocol(remote_backend is not None), backend, remote_backend, **options
            )
        return self._protocol

    def search(self, question: str, documents: Sequence[str] | None = None, *, k: int = RANK_DEPTH) -> LibrarySearch:
        """Where ``question`` leads in the library, without asking a model (``search_library``)."""
        if documents is not None:
            missing = [n for n in documents if n not in {d.name for d in self.index.documents()}]
            if missing:
                self.document(missing[0])  # raises, naming what there is
        found = search_library(
            self.index, question, documents=documents, k=k, embedder=self.embedder, glossary=self.glossary
        )
        if self.embedder is None or found.ranking.about.get("meaning") != self.embedder.name:
            return found
        embedded, total = self.index.vector_count(), self.index.chunk_count()
        if embedded >= total:
            return found
        # while vectors are being added: the chunks without one are found by their words alone, and it says so
        partial = f"{self.embedder.name}: {embedded:,} of {total:,} chunks so far, the rest by words"
        ranking = replace(found.ranking, about={**found.ranking.about, "meaning": partial})
        return replace(found, ranking=ranking)

    def sources(
        self,
        question: str,
        documents: Sequence[str] | None = None,
        *,
        depth: int | None = None,
        read: Callable[[str], Document] | None = None,
    ) -> Sources:
        """What ``question`` reads of the whole library, or of the ``documents`` named: its search, then the
        documents it led to (``LibrarySearch.documents``; the first candidate where it led nowhere). ``depth``: the
        chunks the protocol reads (None: as ``options`` say); ``read``: a document by name (None: its stored
        text; the app reads its files again). The one way the SDK, the app and the benchmarks ask a library."""
        if not self.index.documents():
            raise ConfigError("The library is empty: add documents first (Library.add('report.pdf') or a folder).")
        with embeddings_sent() as sent:
            found = self.search(question, documents)
        depth = depth if depth is not None else max(self.options.read_chunks, self.options.top_k)
        names = found.documents(depth) or [documents[0] if documents else self.documents[0].name]
        return Sources([(read or self.document)(n) for n in names], found.ranking, question_egress(sent))

    def ask(self, question: str, documents: Sequence[str] | None = None, **kwargs: Any) -> RunResult:
        """Answer ``question`` from the whole library, or from the ``documents`` named."""
        found = self.sources(question, documents)
        return with_egress(self.protocol.run(question, found.documents, ranking=found.ranking, **kwargs), found.egress)

    def warm(
        self, names: Sequence[str] | None = None, on_progress: Callable[[ChunkStateProgress], None] | None = None
    ) -> list[ChunkStateProgress]:
        """Compute and save the chunk states of ``names`` (all documents) on the local model, ahead of questions
        (minutes a 10-K on 2 cores, ~9 MB a chunk): what a question reads is saved anyway."""
        local: Backend = self.protocol.local
        if not isinstance(local, PrefixSaver):
            raise ConfigError(f"{local.name} keeps no chunk states: warming needs the embedded model.")
        docs = [self.document(n) for n in (names or [d.name for d in self.documents])]
        return save_chunk_states(docs, local, options=self.options, on_progress=on_progress)

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[IndexedDocument]:
        return iter(self.documents)
