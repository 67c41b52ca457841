"""The on-disk store of saved prompt states: ``<cache_dir>/kv/<key[:2]>/<key>.kv``, least recently used out first.

An entry is the bytes llama.cpp's per-sequence state API writes for one prompt prefix (``LlamaContext.seq_state``),
under a key that names everything the bytes depend on (``backends.llamacpp.prefixes``). What is on disk is never
trusted:

- an entry is written to a temporary file in the same folder, flushed to disk (``fsync``), then renamed over its
  name, so a process killed mid-write leaves a temporary file, never a half entry under a key;
- an entry carries its key, its length and the SHA-256 of its bytes; one that does not match when read (cut
  short, flipped bits, another key) is deleted and reads as missing, so the prefix is computed again;
- the folder holds at most ``max_bytes``: each write removes the least recently used entries beyond it (a read
  marks an entry used by its modification time). Temporary files left by killed writers go after an hour.

Several processes may share the folder: every write is a rename, every read checks what it read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minions.paths import cache_dir

__all__ = ["DEFAULT_MAX_BYTES", "KVStore", "StoreUsage", "kv_dir", "kv_max_bytes"]

log = logging.getLogger(__name__)

MAGIC = b"MINIONS-KV\x00\x01"
"""The first bytes of an entry, with the format's version in the last one."""
SUFFIX = ".kv"
TEMP_PREFIX = ".tmp-"
STALE_TEMP_S = 3600.0
"""A temporary file older than this was left by a writer that died."""
DEFAULT_MAX_BYTES = 8 << 30
"""8 GiB: SmolLM2-135M's state is 23 KB a token, so about 350k tokens (two or three long filings)."""
_HEADER = struct.Struct("<I")


def kv_dir() -> Path:
    """``$MINIONS_KV_CACHE_DIR``, else ``cache_dir()/kv``."""
    explicit = os.environ.get("MINIONS_KV_CACHE_DIR")
    return Path(explicit) if explicit else cache_dir() / "kv"


def kv_max_bytes() -> int:
    """``$MINIONS_KV_CACHE_GB`` (gibibytes, may be fractional), else ``DEFAULT_MAX_BYTES``."""
    value = os.environ.get("MINIONS_KV_CACHE_GB")
    if not value:
        return DEFAULT_MAX_BYTES
    try:
        return int(float(value) * (1 << 30))
    except ValueError:
        log.warning("MINIONS_KV_CACHE_GB=%r is not a number: using %d GiB", value, DEFAULT_MAX_BYTES >> 30)
        return DEFAULT_MAX_BYTES


@dataclass(frozen=True, slots=True)
class StoreUsage:
    entries: int
    bytes: int
    tokens: int
    """Prompt tokens whose state the entries hold (from their headers)."""


class KVStore:
    """Saved prompt states by key (a hex digest). ``get`` returns verified bytes or None, ``put`` never raises
    for a full or read-only disk (the state is then just not kept)."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None) -> None:
        self.root = root if root is not None else kv_dir()
        self.max_bytes = max_bytes if max_bytes is not None else kv_max_bytes()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{SUFFIX}"

    def __contains__(self, key: str) -> bool:
        return self.path(key).is_file()

    def get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """The entry's bytes and metadata, or None when it is missing or does not check out (then it is deleted)."""
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        entry = _parse(raw, key)
        if entry is None:
            log.warning("discarding a damaged or mismatched saved state: %s", path)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first
        return entry

    def put(self, key: str, data: bytes, meta: dict[str, Any] | None = None) -> bool:
        """Write the entry atomically, then trim the store to its size. False when it could not be written."""
        path = self.path(key)
        header = json.dumps(
            {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "meta": meta or {}},
            sort_keys=True,
        ).encode()
        if len(data) + len(header) > self.max_bytes:
            return False
        tmp = path.parent / f"{TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(MAGIC + _HEADER.pack(len(header)) + header)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("could not save a prompt state under %s: %s", self.root, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return False
        self.trim()
        return True

    def _files(self) -> list[tuple[Path, os.stat_result]]:
        out = []
        for path in self.root.glob("*/*"):
            with contextlib.suppress(OSError):
                out.append((path, path.stat()))
        return out

    def trim(self) -> None:
        """Remove the least recently used entries beyond ``max_bytes``, and stale temporary files."""
        entries, now = [], time.time()
        for path, st in self._files():
            if path.name.startswith(TEMP_PREFIX):
                if now - st.st_mtime > STALE_TEMP_S:
                    with contextlib.suppress(OSError):
                        path.unlink()
            elif path.suffix == SUFFIX:
                entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size

    def usage(self) -> StoreUsage:
        entries = total = tokens = 0
        for path, st in self._files():
            if path.suffix != SUFFIX or path.name.startswith(TEMP_PREFIX):
                continue
            entries += 1
            total += st.st_size
            meta = _read_header(path)
            tokens += int(meta.get("meta", {}).get("n_tokens", 0)) if meta else 0
        return StoreUsage(entries, total, tokens)

    def clear(self) -> StoreUsage:
        """Delete every entry (and temporary file); return what was there."""
        before = self.usage()
        for path, _ in self._files():
            if path.suffix == SUFFIX or path.name.startswith(TEMP_PREFIX):
                with contextlib.suppress(OSError):
                    path.unlink()
        return before


def _read_header(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC) + _HEADER.size)
            if len(head) < len(MAGIC) + _HEADER.size or not head.startswith(MAGIC):
                return None
            (n,) = _HEADER.unpack(head[len(MAGIC) :])
            header: dict[str, Any] = json.loads(f.read(n))
            return header
    except (OSError, ValueError):
        return None


def _parse(raw: bytes, key: str) -> tuple[bytes, dict[str, Any]] | None:
    """An entry's bytes and metadata if it is whole, of ``key``, and its checksum matches; else None."""
    start = len(MAGIC) + _HEADER.size
    if len(raw) < start or not raw.startswith(MAGIC):
        return None
    (n,) = _HEADER.unpack(raw[len(MAGIC) : start])
    try:
        header = json.loads(raw[start : start + n])
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("key") != key:
        return None
    data = raw[start + n :]
    if len(data) != header.get("size") or hashlib.sha256(data).hexdigest() != header.get("sha256"):
        return None
    meta = header.get("meta")
    return data, meta if isinstance(meta, dict) else {}
