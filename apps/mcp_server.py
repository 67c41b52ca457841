"""``minions mcp``: the library as a Model Context Protocol server, for the assistants people already use (a desktop
chat client, an editor, an agent), through the official SDK's ``MCPServer``.

Tools (each with a typed schema; what they return is in docs/mcp.md):

- ``search``: where a question leads in the library, passages with their document, page, section, text and
  score; no model runs;
- ``ask``: an answer from the library, by ``local`` unless told otherwise (nothing leaves the device unless the
  user configured a remote model), asked as ``minions ask --library`` asks (``asking.ask_library``), with its
  citations, cost and the egress log of what left the device (a run that failed after some text left is an
  incomplete answer with the error in its notes, so that what left is still said);
- ``list_documents`` and ``add`` (files or folders, only under the folders named at start, with a progress
  notification per file).

Each document's text is a resource, a page at a time (``minions://documents/{name}/pages/{page}``, the name
URL-quoted; a document without pages is one page), so a host can open a cited page. A bad input (an empty
question, an unknown document, a path outside the allowed folders) is a tool error whose message says what to do;
the server stays up. The folders given with ``--watch`` are kept in sync while it runs (``watch.FolderWatch``).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

from minions.documents.files import contained
from minions.errors import MinionsError, OutsideFolderError
from minions.protocols import RunResult
from minions.protocols.library import AddProgress, Library
from minions.protocols.result import EMBED_STEP, LOCAL_STEP
from minions.protocols.search.rank import RANK_DEPTH
from minions.protocols.watch import FolderWatch

from .asking import ask_library, check_protocol

__all__ = ["SERVER_NAME", "LibraryServer", "page_uri"]

SERVER_NAME = "minions"
PAGE_URI = "minions://documents/{name}/pages/{page}"
SEARCH_K = 8
"""Passages ``search`` returns unless asked for another number."""
Protocol = Literal["local", "minions", "minion", "remote", "rag"]


def page_uri(document: str, page: int) -> str:
    """The resource that holds page ``page`` (1-based) of ``document``."""
    return PAGE_URI.format(name=quote(document, safe=""), page=page)


class Passage(BaseModel):
    document: str
    page: int | None = Field(description="The first page the passage is on; None for a document without pages")
    pages: list[int]
    section: str | None
    text: str
    score: float
    resource: str = Field(description="The resource with the passage's page, to open it")


class SearchResult(BaseModel):
    passages: list[Passage]
    searched_chunks: int


class Cited(BaseModel):
    document: str
    page: int | None
    line: int | None = Field(description="The line the quote starts on, for a document without pages")
    label: str
    text: str = Field(description="The verbatim quote")
    resource: str


class AskResult(BaseModel):
    answer: str
    protocol: str
    complete: bool = Field(description="False when the run stopped early; notes say why")
    citations: list[Cited]
    cost_usd: float
    usage: dict[str, dict[str, Any]] = Field(description="Tokens, calls, seconds and dollars by role (local, remote)")
    egress: list[dict[str, Any]] = Field(description="Every piece of text that left this device, by step; [] if none")
    left_device: str = Field(description="What left this device, in a sentence")
    notes: list[str]


class DocumentInfo(BaseModel):
    name: str
    pages: int
    bytes: int
    chunks: int
    added: str = Field(description="When it was indexed (UTC, ISO 8601)")
    meaning_vectors: int = Field(description="Chunks with a meaning vector (searched by meaning too)")
    indexed: Literal["words", "words and meaning"]
    resource: str = Field(description="Its first page")


class Skipped(BaseModel):
    file: str
    why: str


class Added(BaseModel):
    added: list[str]
    unchanged: list[str]
    skipped: list[Skipped]
    documents: int = Field(description="Documents in the library now")


@contextmanager
def _as_tool_error() -> Iterator[None]:
    """Our errors (an unknown document, an empty question, a missing remote model) as tool errors, message kept."""
    try:
        yield
    except MinionsError as exc:
        raise ToolError(str(exc)) from exc


class LibraryServer:
    """The MCP server over ``library``: ``local``/``remote`` answer questions (backends, or None for no remote);
    ``allow``: folders ``add`` may read from; ``watch``: folders kept in sync (``add`` may read from them too);
    ``options``: run options each question is asked with (a ``budget`` per question)."""

    def __init__(
        self,
        library: Library,
        *,
        local: Any,
        remote: Any = None,
        allow: Sequence[Path] = (),
        watch: Sequence[Path] = (),
        options: Mapping[str, Any] | None = None,
        on_progress: Callable[[AddProgress], None] | None = None,
    ) -> None:
        self.library = library
        self.options = dict(options or {})
        self.local, self.remote = local, remote
        self.watch = FolderWatch(library, watch, on_progress=on_progress) if watch else None
        self.folders = [Path(f).expanduser().resolve() for f in allow] + (self.watch.folders if self.watch else [])
        self._asking: dict[str, Library] = {}
        self._one_question = threading.Lock()
        self.mcp = MCPServer(
            SERVER_NAME,
            log_level="WARNING",
            instructions="Search and ask the user's library of documents (filings, reports, papers) on this device. "
            "Cite the document and page; open a cited page as its resource.",
        )
        for tool in (self.search, self.ask, self.list_documents, self.add):
            self.mcp.add_tool(tool)
        self.mcp.resource(PAGE_URI, name="page", mime_type="text/plain")(self.page)

    # -- tools ------------------------------------------------------------------------------------------------
    def search(
        self,
        question: str,
        documents: list[str] | None = None,
        k: Annotated[int, Field(ge=1, le=RANK_DEPTH)] = SEARCH_K,
    ) -> SearchResult:
        """Search the library for the passages that answer a question, best first, without running a model: each
        with its document, page, section, text and score, and the resource of its page. `documents`: names from
        list_documents to search in (default: the whole library)."""
        with _as_tool_error():
            _check_question(question)
            found = self.library.search(question, documents)
        passages = [
            Passage(
                document=r.chunk.document,
                page=r.chunk.pages[0] if r.chunk.pages else None,
                pages=list(r.chunk.pages),
                section=r.chunk.section,
                text=r.chunk.text,
                score=round(r.score, 4),
                resource=page_uri(r.chunk.document, r.chunk.pages[0] if r.chunk.pages else 1),
            )
            for r in found.ranking.ranked[:k]
        ]
        return SearchResult(passages=passages, searched_chunks=found.ranking.chunks)

    def ask(self, question: str, documents: list[str] | None = None, protocol: Protocol = "local") -> AskResult:
        """Answer a question from the library, with citations (document, page or line, the verbatim quote), the
        cost, and every piece of text that left this device. `protocol` "local" (the default) answers on this
        device and sends nothing anywhere; the others need the remote model the user configured. `documents`:
        names from list_documents to ask (default: the whole library)."""
        with _as_tool_error():
            check_protocol(protocol, self.remote, "start minions mcp with --remote provider/model (or set "
                           "MINIONS_REMOTE), or ask with protocol local")  # fmt: skip
            with self._one_question:  # one model run at a time: the local model is one engine
                result = ask_library(self._library_for(protocol), question, documents)
        if result.error and not result.egress:
            raise ToolError(result.error)
        # a run that failed after text left this device still says what left: incomplete, the error in its notes
        return _answer(result)

    def list_documents(self) -> list[DocumentInfo]:
        """The documents in the library: name, pages, size in bytes, chunks, when added, whether they are searched
        by words or by words and meaning, and the resource of their first page."""
        vectors = self.library.index.vector_counts()
        return [
            DocumentInfo(
                name=d.name,
                pages=d.pages,
                bytes=d.bytes,
                chunks=d.chunks,
                added=datetime.datetime.fromtimestamp(d.added_at, datetime.UTC).isoformat(timespec="seconds"),
                meaning_vectors=vectors.get(d.name, 0),
                indexed="words and meaning" if vectors.get(d.name) else "words",
                resource=page_uri(d.name, 1),
            )
            for d in self.library.documents
        ]

    async def add(self, paths: list[str], ctx: Context) -> Added:
        """Add files or folders (PDF, text, Markdown, HTML, .docx) to the library, from the folders this server was
        started with; a progress notification per file. Files already there unchanged are left as they are."""
        with _as_tool_error():
            files = [self._allowed(p) for p in paths]

        def progress(p: AddProgress) -> None:
            message = f"{Path(p.file).name}: {p.status}" + (f" ({p.why})" if p.why else "")
            anyio.from_thread.run(ctx.report_progress, p.files, p.files_total, message)

        report = await anyio.to_thread.run_sync(
            lambda: self.library.add(*files, on_progress=progress, within=self.folders)
        )
        return Added(
            added=[d.name for d in report.added],
            unchanged=[Path(f).name for f in report.unchanged],
            skipped=[Skipped(file=f, why=why) for f, why in report.skipped],
            documents=len(self.library.documents),
        )

    # -- resources --------------------------------------------------------------------------------------------
    def page(self, name: str, page: str) -> str:
        """One page of a document's text (a document without pages is one page)."""
        try:
            doc = self.library.document(name)
        except MinionsError as exc:
            raise ResourceError(str(exc)) from exc
        count = max(1, len(doc.pages))
        if not page.isdigit() or not 1 <= int(page) <= count:
            raise ResourceError(f"{name} has pages 1 to {count}, not {page}.")
        if not doc.pages:
            return doc.text
        p = doc.pages[int(page) - 1]
        return doc.text[p.start : p.end]

    # -- helpers ----------------------------------------------------------------------------------------------
    def _library_for(self, protocol: str) -> Library:
        """A ``Library`` over the same index that asks with ``protocol`` (its model loads at its first question)."""
        if protocol not in self._asking:
            self._asking[protocol] = Library(
                index=self.library.index, local=self.local, remote=self.remote, protocol=protocol,
                embeddings=self.library.embedder, **self.options,
            )  # fmt: skip
        return self._asking[protocol]

    def _allowed(self, given: str) -> Path:
        """``given`` resolved, if it exists under one of the folders this server may read from."""
        folders = ", ".join(str(f) for f in self.folders) or "none"
        path = Path(given).expanduser()
        if not path.is_absolute():
            raise MinionsError(f"{given!r} is not an absolute path: give the full path, under one of: {folders}.")
        if not path.exists():
            raise MinionsError(f"No such file or folder: {given}.")
        try:
            return contained(path, self.folders)
        except OutsideFolderError as exc:
            raise MinionsError(
                f"{given} is outside the folders this server may read ({folders}), once its links are followed: add "
                "from those, or start minions mcp with --allow FOLDER (or --watch FOLDER)."
            ) from exc

    # -- running ----------------------------------------------------------------------------------------------
    def start_watching(self) -> None:
        """Keep the ``--watch`` folders in sync, in a thread (catching up first)."""
        if self.watch is not None:
            self.watch.start()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        self.library.close()


def _check_question(question: str) -> None:
    if not question.strip():
        raise MinionsError("The question is empty: write what you want to find in the documents.")


def _answer(result: RunResult) -> AskResult:
    citations = [
        Cited(
            document=c.document,
            page=c.pages[0] if c.pages else None,
            line=c.line,
            label=c.label,
            text=c.text,
            resource=page_uri(c.document, c.pages[0] if c.pages else 1),
        )
        for c in result.citations
    ]
    prompts = sum(r.step not in (LOCAL_STEP, EMBED_STEP) for r in result.egress)
    said = ([f"{prompts} messages went to the remote model"] if prompts else []) + [result.device_egress or ""]
    left = "; ".join(s for s in said if s) or "nothing left this device"
    return AskResult(
        answer=result.answer,
        protocol=result.protocol,
        complete=result.complete,
        citations=citations,
        cost_usd=result.cost_usd,
        usage={role: u.to_dict() for role, u in result.usage.items()},
        egress=[r.to_dict() for r in result.egress],
        left_device=left,
        notes=list(result.notes),
    )
