"""The app's settings that are fixed at start (where it listens, its token, where it keeps its files), their
defaults in one place, and the rule that only a loopback server may run without a token."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from minions.errors import ConfigError

__all__ = [
    "APP_PORT",
    "DATA_DIR_ENV",
    "DEFAULT_HOST",
    "MAX_JSON_DEPTH",
    "MAX_REQUEST_BYTES",
    "MAX_UPLOAD_BYTES",
    "MCP_PORT",
    "SERVE_PORT",
    "TOKEN_ENV",
    "AppConfig",
    "data_dir",
    "is_loopback",
]

DEFAULT_HOST = "127.0.0.1"
APP_PORT = 8765
SERVE_PORT = 8000
MCP_PORT = 8808
"""``minions mcp --http``'s port."""
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""A request body other than an upload: room for a long document pasted into a message, escaped as JSON."""
MAX_JSON_DEPTH = 32
"""How deep a request's JSON may nest: a chat request needs four levels (body, messages, message, content parts)."""
TOKEN_ENV = "MINIONS_APP_TOKEN"
DATA_DIR_ENV = "MINIONS_APP_DIR"


def data_dir() -> Path:
    """``$MINIONS_APP_DIR``, else ``$XDG_DATA_HOME/minions``, else ``~/.local/share/minions``.

    Not the cache directory: the library and the conversations must survive a cache clean-up.
    """
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "minions"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AppConfig:
    host: str = DEFAULT_HOST
    port: int = APP_PORT
    token: str | None = None
    """Checked as ``Authorization: Bearer <token>`` on every request when set; required off loopback."""
    data_dir: Path | None = None
    """Where the SQLite database and the uploaded files live; None means ``data_dir()``."""
    max_upload_bytes: int = MAX_UPLOAD_BYTES
    max_request_bytes: int = MAX_REQUEST_BYTES
    """The largest request body other than an upload (``apps.limits``); past it, a 413."""
    max_json_depth: int = MAX_JSON_DEPTH
    ui: bool = True
    """Serve the chat page and its API; ``minions serve`` turns it off and keeps the OpenAI routes only."""
    warm_chunk_states: bool = False
    """Read each added document ahead on the embedded model (its chunk states saved: minutes a 10-K); off, a
    document is ready once its text is indexed, and a chunk's state is saved when a question reads it."""

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < 8:
            raise ConfigError("The app token is too short: use at least 8 characters (e.g. `openssl rand -hex 16`).")
        if not is_loopback(self.host) and not self.token:
            raise ConfigError(
                f"Refusing to listen on {self.host} without a token: anyone who can reach it could read your "
                f"documents. Pass --token or set {TOKEN_ENV}, or bind {DEFAULT_HOST}."
            )
        for limit in ("max_upload_bytes", "max_request_bytes", "max_json_depth"):
            if getattr(self, limit) < 1:
                raise ConfigError(f"{limit} must be positive, got {getattr(self, limit)}.")

    @property
    def root(self) -> Path:
        return self.data_dir if self.data_dir is not None else data_dir()

    @classmethod
    def from_env(
        cls,
        *,
        host: str = DEFAULT_HOST,
        port: int = APP_PORT,
        token: str | None = None,
        data_dir: Path | None = None,
        ui: bool = True,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> AppConfig:
        """A config whose token falls back to ``$MINIONS_APP_TOKEN``."""
        token = token or os.environ.get(TOKEN_ENV) or None
        return cls(host=host, port=port, token=token, data_dir=data_dir, ui=ui, max_request_bytes=max_request_bytes)
