"""Embedding models: what each spec resolves to, the egress rule, and a real OpenAI-compatible server's
``/v1/embeddings`` (llama-cpp-python's, on this machine) reached on loopback and, as another machine would be, by
this machine's own network address: then the texts sent are refused unless allowed, and counted."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minions.backends.embeddings import OpenAIEmbedder, SentenceTransformersEmbedder, resolve_embedder
from minions.errors import ConfigError

from ..conftest import run_server


def test_specs_resolve_to_their_embedders(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_embedder("none") is None and resolve_embedder("words") is None
    local = resolve_embedder("sentence-transformers/some/folder")
    assert isinstance(local, SentenceTransformersEmbedder) and local.address is None
    on_loopback = resolve_embedder("openai-compatible/m@http://127.0.0.1:9/v1")
    assert isinstance(on_loopback, OpenAIEmbedder) and not on_loopback.leaves_device
    with pytest.raises(ConfigError, match="Unknown embedding model 'magic'"):
        resolve_embedder("magic")
    monkeypatch.delenv("MINIONS_EMBEDDINGS")
    shipped = resolve_embedder()  # "auto": the test extra's wheel (bge-small is not downloaded here)
    assert isinstance(shipped, SentenceTransformersEmbedder) and Path(shipped.model_path).name == "model"


def test_a_model_on_another_machine_is_refused_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"not on this device.*allow_egress=True or MINIONS_EMBEDDINGS_EGRESS=1"):
        resolve_embedder("openai-compatible/m@http://10.1.2.3:8000/v1")
    allowed = resolve_embedder("openai-compatible/m@http://10.1.2.3:8000/v1", allow_egress=True)
    assert isinstance(allowed, OpenAIEmbedder) and allowed.leaves_device and allowed.sent.requests == 0
    monkeypatch.setenv("MINIONS_EMBEDDINGS_EGRESS", "1")
    assert resolve_embedder("ollama/nomic-embed-text@http://10.1.2.3:11434") is not None


def _own_address() -> str | None:
    """This machine's address on its network (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this picks the interface a route would use
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") else address


@pytest.mark.slow
def test_a_real_server_embeds_and_what_leaves_is_counted(smollm2_gguf: Path) -> None:
    with run_server(smollm2_gguf, "--embedding", "true", "--host", "0.0.0.0") as (url, _):
        here = OpenAIEmbedder("smollm2", url)
        vectors = here.embed(["Total revenue was $31.8 million.", "The auditor is KPMG.", "Revenue rose."])
        assert vectors.shape[0] == 3 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
        assert here.sent.requests == 0  # on loopback: nothing left the device
        address = _own_address()
        if address is None:
            pytest.skip("this machine has no network address but loopback")
        there = url.replace("127.0.0.1", address)
        with pytest.raises(ConfigError, match="not on this device"):
            OpenAIEmbedder("smollm2", there)
        away = OpenAIEmbedder("smollm2", there, allow_egress=True)
        assert np.allclose(away.embed(["Total revenue was $31.8 million."]), vectors[:1], atol=1e-4)
        sent = away.sent
        assert (sent.requests, sent.texts, sent.bytes) == (1, 1, len(b"Total revenue was $31.8 million."))
        assert sent.tokens > 0 and sent.host == there.split("//")[1].split("/")[0]


@pytest.mark.slow
def test_loading_the_model_on_this_device_prints_nothing() -> None:
    """A command's output starts with its answer: the model's load draws no progress bar on stderr."""
    code = "from minions.backends.embeddings import resolve_embedder as r; print(r('auto').embed(['x']).shape)"
    env = {k: v for k, v in os.environ.items() if k != "MINIONS_EMBEDDINGS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().startswith("(1,"), proc.stderr[-2000:]
    assert "Loading" not in proc.stderr and "%|" not in proc.stderr
