"""Whether a model runs on this device: a fact about its address, the same rule for every backend.

- No address (``None``): the model runs in this process, on this device (the embedded llama.cpp model).
- A URL: on this device when it names a Unix socket, or when its host is a loopback address (127.0.0.0/8,
  ``::1``, ``localhost``) or the unspecified one (``0.0.0.0``, ``::``: connecting to it reaches this machine,
  and ``OLLAMA_HOST=0.0.0.0`` is a common setting). Anything else is another machine, whatever the backend is
  called and whatever the name resolves to now: a host name other than ``localhost`` is never trusted.

A URL without a scheme (``OLLAMA_HOST=elsewhere:1234``) is read as ``http://``. Several URLs joined by commas
(a fleet of servers, ``backends.fleet``) are on this device when every one of them is.

Tests play "another machine" without leaving loopback: ``with elsewhere("127.0.0.1:8123"): ...`` makes that one
loopback port count as off the device for the block, so the egress rules and records run for real against a server
on 127.0.0.1 (a test never binds 0.0.0.0 nor reaches this machine's network address).
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from collections import Counter
from collections.abc import Iterator
from urllib.parse import SplitResult, unquote, urlsplit

__all__ = ["elsewhere", "host_of", "on_this_device"]

UNIX_SCHEMES = frozenset({"unix", "http+unix", "https+unix"})

_ELSEWHERE: Counter[tuple[str, int]] = Counter()
"""Loopback (host, port) pairs that count as another machine now (``elsewhere``), with how many blocks hold each."""
_ELSEWHERE_LOCK = threading.Lock()


def _split(address: str) -> SplitResult:
    return urlsplit(address if "://" in address else f"http://{address}")


def on_this_device(address: str | None) -> bool:
    """Whether a model at ``address`` (a base URL, or None for one in this process) runs on this device."""
    if address is None:
        return True
    if "," in address:
        return all(on_this_device(a) for a in address.split(","))
    try:
        parts = _split(address.strip())
        host = (parts.hostname or "").rstrip(".")
    except ValueError:  # not a URL at all (an unbalanced "[", a bad port): not known to be here
        return False
    if parts.scheme.lower() in UNIX_SCHEMES:
        return True
    if _ELSEWHERE and _pair(parts) in _ELSEWHERE:
        return False
    return _this_machine(host)


def _this_machine(host: str) -> bool:
    """Whether connecting to ``host`` (lower-case, no trailing dot) reaches this machine."""
    if host == "localhost":  # hostname is lower-cased already
        return True
    try:
        ip = ipaddress.ip_address(host.split("%")[0])  # an IPv6 zone ("fe80::1%eth0") is not part of the address
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def _pair(parts: SplitResult) -> tuple[str, int]:
    host = (parts.hostname or "").rstrip(".")
    return host, parts.port or (443 if parts.scheme.lower() == "https" else 80)


@contextlib.contextmanager
def elsewhere(address: str) -> Iterator[str]:
    """For the block, the loopback server at ``address`` (``host:port`` or a URL) counts as another machine: what a
    test uses to stand for a remote server while every byte stays on 127.0.0.1. Yields the address as given.
    Only a loopback address with its port may be named (any other one is off the device already)."""
    parts = _split(address.strip())
    pair = _pair(parts)
    if parts.port is None or not _this_machine(pair[0]) or parts.scheme.lower() in UNIX_SCHEMES:
        raise ValueError(f"elsewhere() takes a loopback host:port (127.0.0.1:8123), not {address!r}")
    with _ELSEWHERE_LOCK:
        _ELSEWHERE[pair] += 1
    try:
        yield address
    finally:
        with _ELSEWHERE_LOCK:
            _ELSEWHERE[pair] -= 1
            if _ELSEWHERE[pair] <= 0:
                del _ELSEWHERE[pair]


def host_of(address: str | None) -> str | None:
    """Where text sent to ``address`` goes, for messages: ``host[:port]``, the socket's path, or None (in process)."""
    if address is None:
        return None
    if "," in address:
        return ", ".join(str(host_of(a)) for a in address.split(","))
    try:
        parts = _split(address.strip())
    except ValueError:
        return address
    if parts.scheme.lower() in UNIX_SCHEMES:
        return f"unix socket {unquote(parts.netloc) or parts.path}"  # http+unix://%2Fpath, unix:///path
    return parts.netloc or address
