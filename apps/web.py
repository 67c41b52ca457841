"""The chat app: a FastAPI server for one static page (``static/``), its JSON API, and the OpenAI routes.

    GET    /                                   the page
    GET    /api/info                           limits and choices the page needs
    GET    /api/settings   PUT /api/settings   models, protocol, budget, redaction, written or quoted answer
    GET    /api/documents  POST /api/documents upload (multipart ``files``)
    POST   /api/folders                        add the documents in a folder on this machine
    DELETE /api/documents/{id}
    GET    /api/documents/{id}/pages/{n}       a page's text, for a citation
    GET    /api/conversations  POST /api/conversations
    GET    /api/conversations/{id}  DELETE /api/conversations/{id}
    POST   /api/conversations/{id}/messages    ask: a stream of server-sent events (question, progress, answer;
                                               a written answer's pieces come as progress, then the checked one)
    GET    /v1/models  POST /v1/chat/completions  (openai_api)

The question is stored before the run starts and the answer (or the error) when it ends, so a restart, a
failed model or a closed browser tab never loses either.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, File, Request, UploadFile
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from minions.backends.base import Backend
from minions.documents import SUPPORTED_SUFFIXES
from minions.errors import DocumentError
from minions.events import Event
from minions.protocols import PROTOCOLS, InputError, RunOptions, default_protocol, missing_remote, needs_remote
from minions.protocols.library import Sources
from minions.protocols.search.sent import sent_summary

from . import openai_api
from .config import AppConfig
from .documents import AppDocuments, UploadTooLargeError
from .limits import BodyLimits
from .runs import Models, Outcome, Runner, RunRequest, Settings
from .security import Guard
from .state import ApiError, AppState, install_error_handlers, sse, state_of, status_for
from .store import DocumentRecord, MessageRecord, Store

__all__ = ["STATIC_DIR", "create_app"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
REMOTE_HOW = "set one in Settings or MINIONS_REMOTE"
"""How to give the protocols that need a remote model one, as the page says it."""
_READ_BLOCK = 1024 * 1024
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    # The page runs its own script only: were model output ever to reach the page as HTML, it could not run.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def create_app(
    config: AppConfig | None = None, *, local: Backend | str | None = None, remote: Backend | str | None = None
) -> FastAPI:
    """The app. ``local``/``remote`` (specs or backends; tests pass scripted ones) become the settings' models,
    over what was saved; left out, the saved settings stand, else ``default_local()``/``default_remote()``."""
    config = config or AppConfig()
    root = config.root
    store = Store(root / "minions.sqlite3")
    state = AppState(
        config,
        store,
        AppDocuments(store, root / "library", max_bytes=config.max_upload_bytes),
        Runner(Models(local, remote)),
    )
    models = state.runner.models
    current = state.settings()
    chosen: dict[str, str | None] = {}
    if local is not None:
        chosen["local"] = models.default_local
    if remote is not None:
        chosen["remote"] = models.default_remote
        if current.remote is None:  # local was the only choice: with a remote model comes its default
            chosen["protocol"] = default_protocol(has_remote=True)
    if chosen:
        store.save_settings(current.model_copy(update=chosen).model_dump())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.library.watch()  # the folders added through the app, caught up and kept in sync
        yield
        state.library.unwatch()
        state.reader.stop()
        store.close()

    app = FastAPI(title="minions", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.minions = state
    install_error_handlers(app)
    app.include_router(openai_api.router)
    if config.ui:
        app.include_router(api)
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

        @app.get("/", include_in_schema=False)
        async def index() -> FileResponse:
            return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)

    # The last added runs first: the token and origin checks, then the body's limits.
    app.add_middleware(BodyLimits, max_bytes=config.max_request_bytes, max_depth=config.max_json_depth)
    app.add_middleware(Guard, config=config)
    return app


api = APIRouter(prefix="/api")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FolderBody(_Strict):
    path: str = Field(max_length=4096)


class AskBody(_Strict):
    question: str = Field(max_length=20_000)
    document_ids: list[str] | None = None
    """The library documents to ask about; None means all of them."""


# -- info and settings ---------------------------------------------------------------------------------------
@api.get("/info")
async def info(request: Request) -> dict[str, Any]:
    state = state_of(request)
    return {
        "protocols": [{"name": name, "needs_remote": needs_remote(name)} for name in PROTOCOLS],
        "remote_needed": missing_remote(None, REMOTE_HOW),
        "default_protocol": {
            "with_remote": default_protocol(has_remote=True),
            "without_remote": default_protocol(has_remote=False),
        },
        "accepted": list(SUPPORTED_SUFFIXES),
        "max_upload_bytes": state.config.max_upload_bytes,
        "defaults": state.runner.models.default_settings().model_dump(),
    }


@api.get("/settings")
async def get_settings(request: Request) -> dict[str, Any]:
    return state_of(request).settings().model_dump()


@api.put("/settings")
async def put_settings(body: Settings, request: Request) -> dict[str, Any]:
    state = state_of(request)
    for spec in (body.local, body.remote):
        if spec:
            state.runner.models.check(spec)
    if not body.can_run(body.protocol):
        raise ApiError(400, missing_remote(body.protocol, REMOTE_HOW), param="protocol")
    state.store.save_settings(body.model_dump())
    return body.model_dump()


# -- documents -----------------------------------------------------------------------------------------------
@api.get("/documents")
async def list_documents(request: Request) -> dict[str, Any]:
    state = state_of(request)
    indexed = await asyncio.to_thread(state.library.index_bytes)
    sent = sent_summary(await asyncio.to_thread(state.library.index.sent))  # chunks sent off the device to embed
    by_name = {d["document"]: d for d in sent.pop("per_document")}
    documents = [
        {**_with_reading(state, d, indexed), "embeddings_sent": by_name.get(d.name)} for d in state.library.records()
    ]
    return {"documents": documents, "index_bytes": state.library.index.disk_bytes(), "embeddings_sent": sent}


@api.get("/library/progress")
async def library_progress(request: Request) -> dict[str, Any]:
    """How far adding a folder has come (None when none is being added)."""
    return {"adding": state_of(request).library.progress}


def _with_reading(state: AppState, record: DocumentRecord, indexed: dict[str, int] | None = None) -> dict[str, Any]:
    """A document as the browser sees it: with its share of the text index on disk, and how far the local model
    read it ahead, where it does."""
    status = state.reader.status(record.id)
    index_bytes = (indexed or {}).get(record.id)
    return {**record.to_dict(), "index_bytes": index_bytes, "reading": status.to_dict() if status is not None else None}


def _read_ahead(state: AppState, records: list[DocumentRecord]) -> None:
    """Start reading ``records`` ahead of questions on the settings' local model (``apps.warming``), when the app
    is configured to (``AppConfig.warm_chunk_states``)."""
    if not state.config.warm_chunk_states:
        return
    local = state.runner.models.get(state.settings().local)
    for record in records:
        state.reader.start(record.id, functools.partial(state.library.load, record), local, RunOptions())


@api.post("/documents")
async def upload(request: Request, files: Annotated[list[UploadFile], File()]) -> dict[str, Any]:
    """Add uploaded files; each is checked on its own. All rejected: the first one's error status."""
    state = state_of(request)
    added, rejected, first_error = [], [], None
    for f in files:
        name = f.filename or "upload"
        try:
            data = await _read_limited(f, state.config.max_upload_bytes, name)
            record = await asyncio.to_thread(state.library.add_upload, name, data)
            added.append(record)
        except DocumentError as exc:
            rejected.append({"name": name, "error": str(exc)})
            first_error = first_error or exc
        finally:
            await f.close()
    if not added and first_error is not None:
        raise ApiError(status_for(first_error), "; ".join(r["error"] for r in rejected), code="rejected")
    _read_ahead(state, added)
    return {"added": [_with_reading(state, r) for r in added], "rejected": rejected}


async def _read_limited(f: UploadFile, limit: int, name: str) -> bytes:
    blocks, total = [], 0
    while block := await f.read(_READ_BLOCK):
        total += len(block)
        if total > limit:
            raise UploadTooLargeError(
                f"{name} is larger than the upload limit of {limit / 1024 / 1024:g} MB.", path=name
            )
        blocks.append(block)
    return b"".join(blocks)


@api.post("/folders")
async def add_folder(body: FolderBody, request: Request) -> dict[str, Any]:
    state = state_of(request)
    report = await asyncio.to_thread(state.library.add_folder, body.path)
    _read_ahead(state, report.added)
    return {
        "added": [_with_reading(state, d) for d in report.added],
        "rejected": [{"name": name, "error": why} for name, why in report.skipped],
    }


@api.delete("/documents/{doc_id}")
async def remove_document(doc_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    record = state.library.remove(doc_id)
    if record is None:
        raise ApiError(404, f"No document {doc_id!r} in the library.", code="not_found")
    state.reader.forget(doc_id)
    return {"removed": record.to_dict()}


@api.get("/documents/{doc_id}/pages/{page}")
async def page_text(doc_id: str, page: int, request: Request) -> dict[str, Any]:
    text = await asyncio.to_thread(state_of(request).library.page_text, doc_id, page)
    return {"document": doc_id, "page": page, "text": text}


# -- conversations -------------------------------------------------------------------------------------------
@api.get("/conversations")
async def list_conversations(request: Request) -> dict[str, Any]:
    return {"conversations": [c.to_dict() for c in state_of(request).store.conversations()]}


@api.post("/conversations")
async def new_conversation(request: Request) -> dict[str, Any]:
    return state_of(request).store.new_conversation().to_dict()


@api.get("/conversations/{conversation_id}")
async def get_conversation(conversation_id: str, request: Request) -> dict[str, Any]:
    store = state_of(request).store
    conversation = store.conversation(conversation_id)
    if conversation is None:
        raise ApiError(404, f"No conversation {conversation_id!r}.", code="not_found")
    return {**conversation.to_dict(), "messages": [m.to_dict() for m in store.messages(conversation_id)]}


@api.delete("/conversations/{conversation_id}")
async def delete_conversation(conversation_id: str, request: Request) -> dict[str, Any]:
    if not state_of(request).store.delete_conversation(conversation_id):
        raise ApiError(404, f"No conversation {conversation_id!r}.", code="not_found")
    return {"deleted": conversation_id}


@api.post("/conversations/{conversation_id}/messages")
async def ask(conversation_id: str, body: AskBody, request: Request) -> StreamingResponse:
    state = state_of(request)
    if state.store.conversation(conversation_id) is None:
        raise ApiError(404, f"No conversation {conversation_id!r}.", code="not_found")
    question = body.question.strip()
    if not question:
        raise ApiError(400, "The question is empty: write what you want to know about the documents.", param="question")
    settings = state.settings()
    asked = state.store.add_message(
        conversation_id, "user", question, meta={"document_ids": body.document_ids, "protocol": settings.protocol}
    )

    def store_answer(outcome: Outcome) -> dict[str, Any]:
        return state.store.add_message(
            conversation_id, "assistant", outcome.text, status=outcome.status, meta=outcome.meta()
        ).to_dict()

    run = RunRequest(question, _library_documents(state, body.document_ids, question), settings)
    return StreamingResponse(
        _events(asked, state.runner.stream(run, on_done=store_answer)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _library_documents(state: AppState, ids: list[str] | None, question: str) -> Callable[[], Sources]:
    """What ``question`` reads of the library (the documents ``ids``, or all): its search (``AppDocuments.search``)."""

    def load() -> Sources:
        if ids is not None and not ids:
            raise InputError("No documents selected: tick at least one document in the library.")
        if not state.library.records():
            raise InputError(
                "No documents: add a document to the library (upload a file or add a folder), then ask again."
            )
        return state.library.search(question, ids)

    return load


async def _events(asked: MessageRecord, run: AsyncGenerator[Event | Outcome | None, None]) -> AsyncIterator[str]:
    """The ask stream: the stored question, the run's progress, the stored answer."""
    yield sse({"type": "question", "message": asked.to_dict()})
    try:
        async for item in run:
            if item is None:
                yield ": keep-alive\n\n"
            elif isinstance(item, Event):
                yield sse({"type": "progress", "event": item.to_dict()})
            else:
                message = (
                    dict(item.stored)
                    if item.stored is not None
                    else {"role": "assistant", "content": item.text, "status": item.status, "meta": item.meta()}
                )
                yield sse({"type": "answer", "message": message})
    finally:
        await run.aclose()  # cancels the run when the client has gone
