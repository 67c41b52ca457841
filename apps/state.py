"""What every route shares: the app's state, its one error shape, and server-sent event framing."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from minions.errors import (
    BackendError,
    BudgetExceededError,
    ConfigError,
    DocumentError,
    DocumentNotFoundError,
    MinionsError,
    ModelOutputError,
)
from minions.protocols import default_protocol
from minions.unicode import valid_text

from .config import AppConfig
from .documents import AppDocuments, UnsupportedUploadError, UploadTooLargeError
from .runs import Runner, Settings
from .store import Store
from .warming import Reader

__all__ = [
    "ApiError",
    "AppState",
    "error_body",
    "error_type",
    "install_error_handlers",
    "sse",
    "state_of",
    "status_for",
]

log = logging.getLogger(__name__)


@dataclass
class AppState:
    config: AppConfig
    store: Store
    library: AppDocuments
    """The app's documents: the SDK's ``Library`` on the app's folder (its ``library``), uploads, folders."""
    runner: Runner
    reader: Reader = field(default_factory=Reader)
    """Documents read ahead of questions (``apps.warming``)."""

    def settings(self) -> Settings:
        """The saved settings over the defaults; a saved value that no longer validates is dropped, and a saved
        protocol that needs a remote model, with none set, gives way to the default without one."""
        defaults = self.runner.models.default_settings()
        saved = self.store.settings()
        try:
            settings = Settings.model_validate({**defaults.model_dump(), **saved})
        except ValueError as exc:
            log.warning("ignoring saved settings that no longer validate (%s)", exc)
            return defaults
        if not settings.can_run(settings.protocol):
            return settings.model_copy(update={"protocol": default_protocol(has_remote=False)})
        return settings


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.minions
    return state


class ApiError(Exception):
    """An HTTP error with a message for the user, in OpenAI's error shape (which the app uses too)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param
        super().__init__(message)


def error_body(
    message: str, *, type: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error shape; the message made valid text, since it may quote what the client sent."""
    return {"error": {"message": valid_text(message)[0], "type": type, "code": code, "param": param}}


def error_type(status: int) -> str:
    """OpenAI's ``type`` for an error status: the client's request, or the server's fault."""
    return "invalid_request_error" if status < 500 else "server_error"


HTTP_CODES = {
    400: "bad_request",
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "unprocessable_entity",
    429: "rate_limit_exceeded",
}
"""The ``code`` of the framework's own errors (an unknown route, a wrong method), by status."""


def status_for(exc: BaseException) -> int:
    """The HTTP status of one of our errors."""
    if isinstance(exc, UploadTooLargeError):
        return 413
    if isinstance(exc, UnsupportedUploadError):
        return 415
    if isinstance(exc, DocumentNotFoundError):
        return 404
    if isinstance(exc, DocumentError):
        return 422
    if isinstance(exc, ConfigError | BudgetExceededError):
        return 400
    if isinstance(exc, BackendError | ModelOutputError):  # the model upstream failed, or wrote nothing usable
        return 502
    return 500


def install_error_handlers(app: FastAPI) -> None:
    """Every error the app answers with, ours or the framework's (an unknown route, a wrong method, a body that
    does not parse) or an unexpected one (a 500, logged in one line), in OpenAI's shape."""

    def reply(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(body, status, headers=headers)

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return reply(exc.status, error_body(exc.message, type=exc.type, code=exc.code, param=exc.param))

    async def minions_error(request: Request, exc: Exception) -> JSONResponse:
        status = status_for(exc)
        return reply(status, error_body(str(exc), type=error_type(status), code=type(exc).__name__))

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message, param = _invalid(exc.errors())
        return reply(400, error_body(message, param=param))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        status = exc.status_code
        allowed = (exc.headers or {}).get("Allow", "")
        message = _HTTP_MESSAGES.get(status, "{detail}").format(
            detail=exc.detail, method=request.method, path=request.url.path, allowed=allowed
        )
        body = error_body(message, type=error_type(status), code=HTTP_CODES.get(status))
        return reply(status, body, dict(exc.headers or {}))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(MinionsError, minions_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_middleware(_Unexpected)  # the first added runs innermost: inside the guard and the body's limits


class _Unexpected:
    """The last resort: an exception no handler took is a 500 in OpenAI's shape, logged in one line (the traceback
    at debug level, ``--debug``), not a traceback on the server's console. A response already under way (a
    stream) can only be cut short."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def sending(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if scope["type"] != "http":
                raise
            log.error("%s %s failed: %s: %s", scope["method"], scope["path"], type(exc).__name__, exc)
            log.debug("the traceback", exc_info=exc)
            if not started:
                message = f"The server failed on this request ({type(exc).__name__}); its log has the details."
                body = error_body(message, type="server_error", code="internal_error")
                await JSONResponse(body, 500)(scope, receive, send)


_HTTP_MESSAGES = {
    404: "No route {path} here (the OpenAI routes are GET /v1/models and POST /v1/chat/completions).",
    405: "{method} is not allowed on {path}: use {allowed}.",
}


def _invalid(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str | None]:
    """The message (and the first field at fault) for a request that failed validation."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        at = first["loc"][-1] if len(first.get("loc", ())) > 1 else "?"
        why = (first.get("ctx") or {}).get("error", "it does not parse")
        return f"The request body is not valid JSON: {why} (at character {at}).", None
    if tuple(first.get("loc", ())) == ("body",):
        return "The request body must be a JSON object, sent with Content-Type: application/json.", None
    fields = [".".join(str(p) for p in e["loc"][1:]) or "body" for e in errors[:5]]
    problems = "; ".join(f"{f}: {e['msg']}" for f, e in zip(fields, errors[:5], strict=False))
    return f"Invalid request: {problems}", fields[0] if fields else None


def sse(data: Any) -> str:
    """One server-sent event carrying ``data`` as JSON."""
    return f"data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"
