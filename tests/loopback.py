"""A fake HTTP service on 127.0.0.1 for a test: ``with serving(MyServer()) as server: ... server.url``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = ["EmbeddingsServer", "LoopbackServer", "send_json", "serving"]


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server on a free port of 127.0.0.1; subclasses pass their request handler."""

    daemon_threads = True

    def __init__(self, handler: type) -> None:
        super().__init__(("127.0.0.1", 0), handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


S = TypeVar("S", bound=ThreadingHTTPServer)


@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    """Serve ``server`` from a thread for the block, then shut it down and close its socket."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def send_json(handler: BaseHTTPRequestHandler, value: Any, status: int = 200) -> None:
    """Answer the request ``handler`` is serving with ``value`` as JSON."""
    data = json.dumps(value).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class EmbeddingsServer(LoopbackServer):
    """An OpenAI-compatible ``/v1/embeddings`` that records each request as it came (``requests``: the
    Authorization header, the body's bytes, the inputs), for tests of what is sent where. Its vectors are a bag of
    hashed words (16 numbers): texts that share words point the same way, enough for a search to rank by them."""

    def __init__(self) -> None:
        super().__init__(_EmbeddingsHandler)
        self.requests: list[Recorded] = []

    @property
    def inputs(self) -> list[list[str]]:
        return [r.inputs for r in self.requests]


class Recorded:
    """One request an ``EmbeddingsServer`` received."""

    def __init__(self, authorization: str | None, body: bytes) -> None:
        self.authorization = authorization
        self.body = body
        sent = json.loads(body)["input"]
        self.inputs: list[str] = sent if isinstance(sent, list) else [sent]


def _bag_of_words(text: str) -> list[float]:
    vector = [0.0] * 16
    for word in text.lower().split():
        vector[hashlib.sha256(word.strip(".,?!").encode()).digest()[0] % 16] += 1.0
    return vector


class _EmbeddingsHandler(BaseHTTPRequestHandler):
    server: EmbeddingsServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        recorded = Recorded(self.headers.get("Authorization"), body)
        self.server.requests.append(recorded)
        vectors = [_bag_of_words(t) for t in recorded.inputs]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        tokens = sum(len(t.split()) for t in recorded.inputs)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        send_json(self, {"object": "list", "data": data, "model": json.loads(body)["model"], "usage": usage})
