"""The checks every request passes before a route sees it (an ASGI middleware, so streams stay streams):

- the token, when the server has one: ``Authorization: Bearer <token>`` (API clients), or the cookie that
  opening ``/?token=<token>`` once sets (the browser, which cannot add headers to a page load);
- on a loopback server, a ``Host`` that names loopback: a web page cannot reach the app by DNS rebinding;
- no cross-origin writes: a request whose ``Origin`` is not the app itself is refused, so another web page
  open in the browser cannot upload, ask or read a folder through the user's browser;
- uploads declare their size (``Content-Length``) and stay under the limit before any byte is read.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .config import AppConfig, is_loopback

__all__ = ["COOKIE", "UPLOAD_PATH", "Guard", "reply"]

COOKIE = "minions_token"
UPLOAD_PATH = "/api/documents"
MULTIPART_OVERHEAD = 1024 * 1024
"""Room in an upload request for the multipart framing around the files."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Guard:
    def __init__(self, app: ASGIApp, config: AppConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = self.config.token
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        refusal = self._origin_refusal(headers)
        if refusal is None and token and scope["path"] == "/" and _same(query.get("token", [""])[0], token):
            # Swap the token in the address bar for a cookie, so it leaves the URL (and the history).
            cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode("latin-1"))],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        if refusal is None and token and not self._authorized(headers):
            refusal = (
                401,
                "Missing or wrong token: send Authorization: Bearer <token>, or open /?token=<token>.",
                "invalid_api_key",
            )
        if refusal is None and scope["method"] == "POST" and scope["path"] == UPLOAD_PATH:
            refusal = self._size_refusal(headers)
        if refusal is not None:
            await reply(send, *refusal)
            return
        await self.app(scope, receive, send)

    def _origin_refusal(self, headers: dict[str, str]) -> tuple[int, str, str] | None:
        host = headers.get("host", "")
        if is_loopback(self.config.host) and not is_loopback(_hostname(host)):
            return 403, f"This server answers on loopback addresses only, not as {host!r}.", "bad_host"
        origin = headers.get("origin")
        if origin == "null":
            return 403, "Requests from opaque origins are refused.", "cross_origin"
        if origin is not None and urlsplit(origin).netloc != host:
            return 403, f"Cross-origin request from {origin} refused.", "cross_origin"
        return None

    def _size_refusal(self, headers: dict[str, str]) -> tuple[int, str, str] | None:
        length = headers.get("content-length")
        if length is None or not length.isdigit():
            return 411, "Uploads must declare their size (Content-Length).", "length_required"
        if int(length) > self.config.max_upload_bytes + MULTIPART_OVERHEAD:
            limit = self.config.max_upload_bytes / 1024 / 1024
            return 413, f"The upload is larger than the limit of {limit:g} MB.", "too_large"
        return None

    def _authorized(self, headers: dict[str, str]) -> bool:
        token = self.config.token or ""
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and _same(given.strip(), token):
            return True
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and _same(value, token):
                return True
        return False


def _same(given: str, token: str) -> bool:
    return bool(given) and secrets.compare_digest(given.encode(), token.encode())


def _hostname(host: str) -> str:
    """``127.0.0.1`` from ``127.0.0.1:8765``, ``::1`` from ``[::1]:8765``."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


async def reply(
    send: Send,
    status: int,
    message: str,
    code: str,
    *,
    close: bool = False,
    then: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """An OpenAI-shaped error sent before the app sees the request; ``close``: the client's body is left unread,
    so the connection cannot carry another request. ``then``: what to do after the error is sent and before the
    response ends (read the rest of the body, so that a client still sending gets to read the error)."""
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "code": code, "param": None}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": then is not None})
    if then is not None:
        await then()
        await send({"type": "http.response.body", "body": b""})
