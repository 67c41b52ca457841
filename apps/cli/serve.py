"""``minions app`` (the chat app), ``minions serve`` (the OpenAI-compatible API) and ``minions mcp`` (the library
as an MCP server), for ``minions.apps.cli.main``.

    minions app   [--port 8765] [--host 127.0.0.1] [--token T] [--data-dir DIR] [--local M] [--remote M]
    minions serve [--port 8000] ...
    minions mcp   [--library DIR] [--watch FOLDER]... [--allow FOLDER]... [--http [--port 8808] ...]

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

from ..config import (
    APP_PORT,
    DATA_DIR_ENV,
    DEFAULT_HOST,
    MAX_REQUEST_BYTES,
    MCP_PORT,
    SERVE_PORT,
    TOKEN_ENV,
    AppConfig,
)
from .models import add_budget_options

__all__ = ["add_app_parsers", "cmd_app", "cmd_mcp", "cmd_serve"]

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

    mcp = sub.add_parser("mcp", help="the library as an MCP server, for assistants: over stdio, or --http")
    from .index import add_index_parsers, add_library_option

    add_library_option(mcp, "the library it serves")
    mcp.add_argument("--watch", action="append", default=[], metavar="FOLDER", help="keep this folder in sync "
                     "(repeatable); the add tool may read from it")  # fmt: skip
    mcp.add_argument("--allow", action="append", default=[], metavar="FOLDER", help="a folder the add tool may "
                     "read from (repeatable); nothing else can be added")  # fmt: skip
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    _add_server_options(mcp, MCP_PORT, data=False)
    add_model_options(mcp)
    add_budget_options(mcp, " per question")
    mcp.set_defaults(func=cmd_mcp)

    add_index_parsers(sub, add_model_options)


def _add_server_options(p: argparse.ArgumentParser, port: int, *, data: bool = True) -> None:
    p.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}; any other needs a token)"
    )
    p.add_argument("--port", type=int, default=port, help=f"port (default {port})")
    p.add_argument("--token", help=f"require this bearer token (default: ${TOKEN_ENV})")
    if data:
        where = "library and conversations (default: $MINIONS_APP_DIR or ~/.local/share/minions)"
        p.add_argument("--data-dir", type=Path, help=where)
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


def cmd_mcp(args: argparse.Namespace) -> int:
    """``minions mcp``: the library's tools over stdio (what desktop assistants start), or over streamable HTTP with
    the checks and limits of ``minions serve`` (``security.Guard``, ``limits.BodyLimits``)."""
    import sys

    from minions.protocols.background import resume_embedding

    from ..mcp_server import LibraryServer
    from .index import add_line, open_library
    from .models import budget_options, resolve_models

    local, remote = resolve_models(args)
    allow = [Path(f).expanduser() for f in args.allow]
    for folder in allow:
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a folder: --allow takes folders the add tool may read from.")
    config = None
    if args.http:
        config = AppConfig.from_env(host=args.host, port=args.port, token=args.token, ui=False,
                                    max_request_bytes=max(1, int(args.max_request_mb * 1024 * 1024)))  # fmt: skip
    server = LibraryServer(
        open_library(args), local=local, remote=remote, allow=allow, watch=args.watch, options=budget_options(args),
        on_progress=lambda p: print(add_line(p), file=sys.stderr, flush=True),
    )  # fmt: skip
    server.library.load_in_background()  # the first search does not wait for the embedding model's load
    resume_embedding(server.library)  # and vectors a build left missing are added meanwhile
    try:
        server.start_watching()
        if config is None:
            server.mcp.run()  # stdio: stdout carries the protocol, so everything else goes to stderr
        else:
            _serve_mcp_http(server, config, debug=args.debug)
    except KeyboardInterrupt:  # Ctrl-C is how it stops
        pass
    finally:
        server.close()
    return 0


def _serve_mcp_http(server: Any, config: AppConfig, *, debug: bool) -> None:
    import sys

    import uvicorn

    from ..limits import BodyLimits
    from ..security import Guard

    sock = _bind(config.host, config.port)
    app = server.mcp.streamable_http_app(host=config.host)
    guarded = Guard(BodyLimits(app, max_bytes=config.max_request_bytes, max_depth=config.max_json_depth), config)
    shown = f"[{config.host}]" if ":" in config.host else config.host
    print(f"minions mcp on http://{shown}:{config.port}/mcp  (library: {server.library.index.path}; Ctrl-C stops)",
          file=sys.stderr, flush=True)  # fmt: skip
    uvicorn.Server(uvicorn.Config(guarded, log_level="debug" if debug else "warning")).run(sockets=[sock])


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
