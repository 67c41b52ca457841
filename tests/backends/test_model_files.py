"""A model file's cache key: one function, for every cache that depends on the file's weights."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minions.backends.model_files import PACKAGED, model_file_key, resolve_model_path
from minions.errors import ModelNotFoundError


def test_model_file_key_names_the_file_and_changes_with_its_weights(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for path in (a, b):
        path.parent.mkdir()
        path.write_bytes(b"GGUF" + bytes(100))
        os.utime(path, ns=(1, 1))
    assert model_file_key(a) == model_file_key(b)  # same name, bytes and time: the same file, wherever it lies
    assert model_file_key(a).startswith("model-")

    b.write_bytes(b"GGUF" + bytes(99) + b"\1")  # one name, the same size, other weights
    os.utime(b, ns=(1, 1))
    assert model_file_key(a) != model_file_key(b)

    b.write_bytes(b"GGUF" + bytes(100))  # the first bytes again, rewritten later: no cache outlives its weights
    os.utime(b, ns=(2, 2))
    assert model_file_key(a) != model_file_key(b)


def test_a_packaged_model_is_joined_once_into_the_models_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path))
    path = resolve_model_path("gemma3-270m")
    assert path.parent == tmp_path / "models" and path.read_bytes()[:4] == b"GGUF"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no part left behind
    stamp = path.stat().st_mtime_ns
    assert resolve_model_path("gemma3-270m") == path and path.stat().st_mtime_ns == stamp  # joined once


def test_a_packaged_model_not_installed_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(PACKAGED, "tiny-base", ("no_such_module_here", "tiny-base-gguf", "a tiny base model"))
    with pytest.raises(ModelNotFoundError, match="pip install tiny-base-gguf"):
        resolve_model_path("tiny-base")
