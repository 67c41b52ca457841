"""The store of saved prompt states: atomic writes, checked reads, least-recently-used trimming, and a writer
killed mid-write (a real process, SIGKILL) leaving nothing that is read back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minions.backends.llamacpp.kvstore import TEMP_PREFIX, KVStore, kv_dir

KEY = "ab" + "0" * 62


def test_an_entry_reads_back_with_its_metadata(tmp_path: Path) -> None:
    store = KVStore(tmp_path, max_bytes=1 << 20)
    assert store.get(KEY) is None and KEY not in store
    assert store.put(KEY, b"state" * 100, {"n_tokens": 7})
    data, meta = store.get(KEY) or (b"", {})
    assert data == b"state" * 100 and meta == {"n_tokens": 7}
    usage = store.usage()
    assert (usage.entries, usage.tokens) == (1, 7) and usage.bytes > 500


@pytest.mark.parametrize("damage", ["truncate", "flip", "other_key", "garbage"])
def test_a_damaged_entry_is_never_trusted_and_is_removed(tmp_path: Path, damage: str) -> None:
    store = KVStore(tmp_path, max_bytes=1 << 20)
    store.put(KEY, bytes(range(256)) * 40, {"n_tokens": 3})
    path = store.path(KEY)
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) - 100])
    elif damage == "flip":
        path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    elif damage == "other_key":
        other = "cd" + "1" * 62
        store.put(other, b"x" * 10)
        os.replace(store.path(other), path)
    else:
        path.write_bytes(b"\x00" * 50)
    assert store.get(KEY) is None
    assert not path.exists()  # dropped, so the prefix is computed and saved again
    assert store.put(KEY, b"fresh") and store.get(KEY) == (b"fresh", {})


def test_the_least_recently_used_entries_go_beyond_the_cap(tmp_path: Path) -> None:
    store = KVStore(tmp_path, max_bytes=3700)  # three entries of ~1.2 KB
    keys = [f"{i:02x}" + "e" * 62 for i in range(3)]
    for i, key in enumerate(keys):
        store.put(key, b"z" * 1000)
        os.utime(store.path(key), (1000 + i, 1000 + i))  # written in this order, long ago
    assert store.get(keys[0]) is not None  # read: now the most recently used
    store.put("ff" + "e" * 62, b"z" * 1000)
    assert [k in store for k in keys] == [True, False, True]
    assert store.usage().bytes <= 3700


def test_clear_removes_everything(tmp_path: Path) -> None:
    store = KVStore(tmp_path, max_bytes=1 << 20)
    store.put(KEY, b"a" * 10, {"n_tokens": 2})
    (store.path(KEY).parent / f"{TEMP_PREFIX}1-dead").write_bytes(b"half")
    assert store.clear().entries == 1
    assert store.usage().entries == 0 and not list(tmp_path.glob("*/*"))


def test_the_folder_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIONS_KV_CACHE_DIR", str(tmp_path / "kv"))
    assert kv_dir() == tmp_path / "kv" and KVStore().root == tmp_path / "kv"
    monkeypatch.delenv("MINIONS_KV_CACHE_DIR")
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path))
    assert kv_dir() == tmp_path / "kv"


# A writer on a slow disk: every fsync takes long, so the kill lands after the bytes are written, before the
# rename. It prints "writing" once the temporary file exists.
_WRITER = """
import os, sys, time
from pathlib import Path
from minions.backends.llamacpp.kvstore import KVStore
real = os.fsync
def slow(fd):
    print("writing", flush=True)
    time.sleep(60)
    real(fd)
os.fsync = slow
KVStore(Path(sys.argv[1]), max_bytes=1 << 30).put(sys.argv[2], os.urandom(8 << 20), {"n_tokens": 9})
"""


def test_a_writer_killed_mid_write_leaves_no_entry(tmp_path: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), KEY], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        temps = list(tmp_path.glob(f"*/{TEMP_PREFIX}*"))
        assert len(temps) == 1 and temps[0].stat().st_size > 8 << 20  # the bytes are there, not yet renamed
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    store = KVStore(tmp_path, max_bytes=1 << 30)
    assert KEY not in store and store.get(KEY) is None
    # the next writer saves the entry; a temporary file that old is cleared
    os.utime(temps[0], (time.time() - 7200,) * 2)
    assert store.put(KEY, b"whole", {"n_tokens": 1})
    assert store.get(KEY) == (b"whole", {"n_tokens": 1})
    assert not temps[0].exists()


def test_the_damaged_entry_after_a_kill_is_not_used(tmp_path: Path) -> None:
    """A file cut short where an entry was (a disk that lost its tail): read as missing."""
    store = KVStore(tmp_path, max_bytes=1 << 20)
    store.put(KEY, os.urandom(4096), {"n_tokens": 5})
    with open(store.path(KEY), "r+b") as f:
        f.truncate(2000)
    assert store.get(KEY) is None
