"""A model file's cache key: one function, for every cache that depends on the file's weights."""

from __future__ import annotations

import os
from pathlib import Path

from minions.backends.model_files import model_file_key


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
