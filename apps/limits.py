"""What a request body may be before any route parses it (an ASGI middleware, after ``security.Guard``):

- at most ``max_request_bytes``: a declared ``Content-Length`` over it is refused before a byte is read, and a
  body sent without one (chunked) is counted as it comes and refused as soon as it passes the limit, so an
  oversized body never sits in memory whole (uploads have their own limit, ``Guard``'s);
- JSON nested at most ``max_json_depth`` deep, checked on the bytes (strings cut out, then brackets only), so a
  ``[[[[...`` body cannot exhaust the parser's recursion;
- text that every consumer can take: invalid UTF-8 bytes and escaped surrogates (``"\\ud800"``) become U+FFFD
  (``minions.unicode``), and the count goes to the route as ``request.state.replaced_characters``.

A refusal is an OpenAI-shaped error (413, 400), like every other. After a 413 is sent the rest of the body is
read and thrown away while it keeps coming (up to ``DRAIN_FACTOR`` times the limit, each piece within
``DRAIN_WAIT_S``), and only then is the connection closed: a client still sending when the server closes would see
its connection reset, not the error that says why.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from minions.unicode import REPLACEMENT, valid_text

from .security import UPLOAD_PATH, ASGIApp, Message, Receive, Scope, Send, reply

__all__ = ["BodyLimits", "json_too_deep", "valid_json"]

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
DRAIN_FACTOR = 16
"""An oversized body is read and discarded up to this many times the limit after the 413; past that, the
connection is closed under the client (its bytes cost the server nothing kept, but time)."""
DRAIN_WAIT_S = 1.0
"""How long the server waits for the next piece of an oversized body before it closes the connection."""


def json_too_deep(body: bytes, limit: int) -> bool:
    """Whether the JSON in ``body`` nests arrays and objects more than ``limit`` deep. Unbalanced brackets are left
    to the parser. Each pass of ``replace`` removes the innermost level: every ``[]`` left is a leaf."""
    brackets = _STRING.sub(b"", body).translate(_SQUARE, _NOT_BRACKETS)
    if b"[" * (limit + 1) in brackets:  # the common attack, found at once
        return True
    for _ in range(limit):
        if b"[]" not in brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return b"[]" in brackets


def valid_json(value: Any) -> tuple[Any, int]:
    """``value`` (parsed JSON) with its strings, keys included, made valid (``valid_text``), and how many
    characters were replaced."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        pairs = [valid_json(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        out, total = {}, 0
        for k, v in value.items():
            (key, n), (item, m) = valid_text(k), valid_json(v)
            out[key] = item
            total += n + m
        return out, total
    return value, 0


class BodyLimits:
    def __init__(self, app: ASGIApp, *, max_bytes: int, max_depth: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "POST" and scope["path"] == UPLOAD_PATH):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            await self._too_large(receive, send, more=True)
            return
        blocks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            blocks.append(message.get("body", b""))
            size += len(blocks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._too_large(receive, send, more=more)
                return
        body = b"".join(blocks)
        if body and not headers.get("content-type", "").startswith(("multipart/", "application/x-www-form")):
            if json_too_deep(body, self.max_depth):
                await reply(send, 400, f"The request body nests JSON more than {self.max_depth} deep.", "too_deep")
                return
            body = self._valid(body, scope)
        await self.app(scope, _replay(body, receive), send)

    def _valid(self, body: bytes, scope: Scope) -> bytes:
        """``body`` with invalid UTF-8 and escaped surrogates replaced; only parsed again where it has them."""
        try:
            text = body.decode("utf-8")
            replaced = 0
        except UnicodeDecodeError:
            text = body.decode("utf-8", "replace")
            replaced = text.count(REPLACEMENT) - body.count(REPLACEMENT.encode())
        if _SURROGATE_ESCAPE.search(body):
            try:
                value, n = valid_json(json.loads(text))
            except ValueError:  # not JSON: the route's parser says so
                value, n = None, 0
            if n:
                text, replaced = json.dumps(value, ensure_ascii=False), replaced + n
        if not replaced:
            return body
        scope.setdefault("state", {})["replaced_characters"] = replaced
        return text.encode("utf-8")

    async def _too_large(self, receive: Receive, send: Send, *, more: bool) -> None:
        async def drain() -> None:
            drained, going = 0, more
            while going and drained <= DRAIN_FACTOR * self.max_bytes:
                try:
                    message = await asyncio.wait_for(receive(), DRAIN_WAIT_S)
                except TimeoutError:  # the client stopped sending (or never began): close
                    return
                if message["type"] != "http.request":  # the client left
                    return
                drained += len(message.get("body", b""))
                going = message.get("more_body", False)

        limit = self.max_bytes / 1024 / 1024
        message = f"The request body is larger than the limit of {limit:g} MB (--max-request-mb)."
        await reply(send, 413, message, "request_too_large", close=True, then=drain)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the body read here, then what the client sends next (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
