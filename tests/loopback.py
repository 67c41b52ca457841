"""A fake HTTP service on 127.0.0.1 for a test: ``with serving(MyServer()) as server: ... server.url``."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = ["LoopbackServer", "send_json", "serving"]


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
