"""What every route shares: the app's state, its one error shape, and server-sent event framing."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from minions.errors import (
    BackendError,
    BudgetExceededError,
    ConfigError,
    DocumentError,
    DocumentNotFoundError,
    MinionsError,
)
from minions.protocols import default_protocol

from .config import AppConfig
from .library import Library, UnsupportedUploadError, UploadTooLargeError
from .reading import Reader
from .runs import Runner, Settings
from .store import Store

__all__ = ["ApiError", "AppState", "error_body", "install_error_handlers", "sse", "state_of", "status_for"]

log = logging.getLogger(__name__)


@dataclass
class AppState:
    config: AppConfig
    store: Store
    library: Library
    runner: Runner
    reader: Reader = field(default_factory=Reader)
    """Documents read ahead of questions (``apps.reading``)."""

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
    return {"error": {"message": message, "type": type, "code": code, "param": param}}


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
    if isinstance(exc, BackendError):
        return 502
    return 500


def install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return JSONResponse(error_body(exc.message, type=exc.type, code=exc.code, param=exc.param), exc.status)

    async def minions_error(request: Request, exc: Exception) -> JSONResponse:
        status = status_for(exc)
        kind = "invalid_request_error" if status < 500 else "server_error"
        return JSONResponse(error_body(str(exc), type=kind, code=type(exc).__name__), status)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        return JSONResponse(error_body(f"Invalid request: {problems}"), 400)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(MinionsError, minions_error)
    app.add_exception_handler(RequestValidationError, validation_error)


def sse(data: Any) -> str:
    """One server-sent event carrying ``data`` as JSON."""
    return f"data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"
