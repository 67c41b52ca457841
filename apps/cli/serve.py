"""``minions app`` (the chat app) and ``minions serve`` (the OpenAI-compatible API), for ``minions.apps.cli.main``.

    minions app   [--port 8765] [--host 127.0.0.1] [--token T] [--data-dir DIR] [--local M] [--remote M]
    minions serve [--port 8000] ...

Both bind 127.0.0.1 unless told otherwise; any other address needs a token (--token or $MINIONS_APP_TOKEN).
FastAPI and uvicorn load only when a command runs, so the rest of the CLI starts fast without them.
"""

from __future__ import annotations

import argparse
import errno
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minions.errors import ConfigError
from minions.paths import cache_dir, writable_dir

from ..config import APP_PORT, DATA_DIR_ENV, DEFAULT_HOST, MAX_REQUEST_BYTES, SERVE_PORT, TOKEN_ENV, AppConfig

__all__ = ["add_app_parsers", "cmd_app", "cmd_serve"]

log = logging.getLogger(__name__)


def add_app_parsers(sub: Any, add_model_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``app`` and ``serve`` to the ``minions`` subcommands; ``add_model_options`` adds --local/--remote."""
    app = sub.add_parser("app", help="the chat app over your documents, in the browser")
    _add_server_options(app, APP_PORT)
    add_model_options(app)
    app.set_defaults(func=cmd_app)

    serve = sub.add_parser("serve", help="an OpenAI-compatible API: the model name picks the protocol")
    _add_server_options(serve, SERVE_PORT)
    add_model_options(serve)
    serve.set_defaults(func=cmd_serve)

    from .library import add_index_parsers

    add_index_parsers(sub, add_model_options)


def _add_server_options(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}; any other needs a token)"
    )
    p.add_argument("--port", type=int, default=port, help=f"port (default {port})")
    p.add_argument("--token", help=f"require this bearer token (default: ${TOKEN_ENV})")
    p.add_argument(
        "--data-dir", type=Path, help="library and conversations (default: $MINIONS_APP_DIR or ~/.local/share/minions)"
    )
    mb = MAX_REQUEST_BYTES / 1024 / 1024
    p.add_argument(
        "--max-request-mb", type=float, default=mb, help=f"largest request body but an upload (default {mb:g})"
    )


def cmd_app(args: argparse.Namespace) -> int:
    return _serve(args, ui=True)


def cmd_serve(args: argparse.Namespace) -> int:
    return _serve(args, ui=False)


def _serve(args: argparse.Namespace, *, ui: bool) -> int:
    """Check what start-up needs (the folders, the port, the local model file) and say what is wrong in one line
    before anything claims to be serving; then serve on the socket already bound."""
    try:
        import uvicorn

        from ..web import create_app
    except ImportError as exc:
        raise ConfigError(
            f"The app needs fastapi, uvicorn and python-multipart ({exc}): pip install fastapi uvicorn python-multipart"
        ) from exc
    config = AppConfig.from_env(
        host=args.host,
        port=args.port,
        token=args.token,
        data_dir=args.data_dir,
        ui=ui,
        max_request_bytes=max(1, int(args.max_request_mb * 1024 * 1024)),
    )
    writable_dir(config.root, f"pass --data-dir or set {DATA_DIR_ENV} to a folder you can write")
    writable_dir(cache_dir(), "set MINIONS_CACHE_DIR to a folder you can write")
    sock = _bind(config.host, config.port)
    app = create_app(config, local=args.local, remote=args.remote)
    # The local model's file is found and checked now (it loads on the first question, which takes seconds).
    state = app.state.minions
    state.runner.models.get(state.settings().local)
    shown = f"[{config.host}]" if ":" in config.host else config.host
    what = "minions app" if ui else "minions OpenAI-compatible API"
    print(f"{what} on http://{shown}:{config.port}/{'' if ui else 'v1'}  (data: {config.root}; Ctrl-C stops)")
    if config.token:
        how = "open /?token=<token> once in the browser" if ui else "send it as the API key"
        print(f"A token is required: {how}.")
    log_level = "debug" if args.debug else "warning"
    uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])
    return 0


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; a ConfigError that says what to do when it is taken or not ours."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"Port {port} on {host} is in use (another server?): pass --port, or stop what listens there."
            ) from exc
        raise ConfigError(f"Cannot listen on {host}:{port} ({exc.strerror or exc}): pass --host or --port.") from exc
    sock.set_inheritable(True)
    return sock
