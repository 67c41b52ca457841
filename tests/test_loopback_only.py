"""Tests and benchmarks talk only to loopback: none binds a server to every interface (``0.0.0.0``, ``::``, ``""``)
or reaches this machine's network address or another machine. "Another machine" is a loopback port that a test marks
as off the device (``minions.backends.address.elsewhere``).

The scan reads the code (Python's own parser), as ``test_layers`` does for imports: an address in a ``(host, port)``
pair, after ``--host``/``--bind`` or in ``host=``, a URL handed to a call that sends, and the calls that find this
machine's own addresses. A line that names such an address only to check that it is refused says so with
``# refused: binds nothing``.
"""

from __future__ import annotations

import ast
import ipaddress
import itertools
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tests", "evals", "scripts")
EXEMPT = "# refused: binds nothing"
OWN_ADDRESS_CALLS = frozenset({"gethostname", "getfqdn", "gethostbyname", "gethostbyname_ex", "if_nameindex"})
SENDING_CALLS = frozenset({"get", "post", "put", "request", "stream", "urlopen", "create_connection", "connect"})
HOST_FLAGS = frozenset({"--host", "--bind", "--listen"})


def _loopback(host: str) -> bool:
    """Whether ``host`` (or a URL's) is on loopback: ``localhost``, 127.0.0.0/8 or ``::1`` (not the unspecified
    address)."""
    host = _url_host(host) or host
    if host.rstrip(".").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _an_address(host: str) -> bool:
    """Whether a string reads as a host to bind or reach (not any text): an IP address, ``""`` or ``localhost``."""
    if host == "" or host.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _url_host(text: str) -> str | None:
    if "://" not in text:
        return None
    try:
        return urlsplit(text).hostname
    except ValueError:
        return None


def _pairs(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """Neighbouring items of a list, a tuple or a call's arguments: where a command line's flag meets its value."""
    items = node.elts if isinstance(node, ast.List | ast.Tuple) else node.args if isinstance(node, ast.Call) else []
    return list(itertools.pairwise(items))


def _findings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each address the code binds or reaches off loopback; the line is the node's last, where a
    comment sits."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        for flag, value in _pairs(node):
            host = _text(value)
            if _text(flag) in HOST_FLAGS and host is not None and not _loopback(host):
                found.add((node.end_lineno or node.lineno, f"{_text(flag)} {host}"))
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in OWN_ADDRESS_CALLS:
            found.add((node.end_lineno or node.lineno, f"{name}(): this machine's own name or address"))
        for keyword in node.keywords:
            host = _text(keyword.value)
            if keyword.arg in ("host", "bind") and host is not None and not _loopback(host):
                found.add((node.end_lineno or node.lineno, f"{keyword.arg}={host!r}"))
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Tuple) and len(first.elts) == 2 and _text(first.elts[1]) is None:
            host = _text(first.elts[0])  # a (host, port) pair: what bind(), connect() and a server take
            if host is not None and _an_address(host) and not _loopback(host):
                found.add((node.end_lineno or node.lineno, f"the socket address ({host!r}, ...)"))
        url = _text(first)
        host = _url_host(url) if url is not None and name in SENDING_CALLS else None
        if host is not None and not _loopback(host):
            found.add((node.end_lineno or node.lineno, f"{name}({url!r})"))
    return sorted(found)


def _sources() -> list[Path]:
    files = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            script = path.is_file() and not path.suffix and path.read_bytes().startswith(b"#!/usr/bin/env python")
            if path.suffix == ".py" or script:
                files.append(path)
    return files


def _violations(path: Path) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    return [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for line, what in _findings(ast.parse(text))
        if EXEMPT not in lines[line - 1]
    ]


def test_the_scan_finds_what_it_looks_for() -> None:
    """Each pattern of the rule is caught (a scan that finds nothing would pass every tree)."""
    code = """
server = HTTPServer(("0.0.0.0", 0), Handler)
s.connect(("192.0.2.1", 9))
s.bind(("", 8080))
subprocess.run(["minions", "serve", "--host", "0.0.0.0"])
run_server(model, "--host", "::")
uvicorn.run(app, host="0.0.0.0")
me = socket.gethostname()
httpx.get("http://10.0.0.7:8000/v1/models")
"""
    assert [line for line, _ in _findings(ast.parse(code))] == [2, 3, 4, 5, 6, 7, 8, 9]
    fine = """
server = HTTPServer(("127.0.0.1", 0), Handler)
s.connect(("::1", port))
subprocess.run(["minions", "serve", "--host", "127.0.0.1"])
uvicorn.run(app, host="localhost")
httpx.get("http://127.0.0.1:8000/v1/models")
assert not on_this_device("http://10.0.0.7:8000/v1")
pair = ("name", "value")
"""
    assert _findings(ast.parse(fine)) == []


@pytest.mark.parametrize("folder", FOLDERS)
def test_tests_and_benchmarks_talk_only_to_loopback(folder: str) -> None:
    assert [v for path in _sources() if path.is_relative_to(ROOT / folder) for v in _violations(path)] == []
