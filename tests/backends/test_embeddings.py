"""Embedding models: what each spec resolves to, the egress rule, and a real OpenAI-compatible server's
``/v1/embeddings`` (llama-cpp-python's, on this machine) reached on loopback and, as another machine would be, on a
loopback port that the test marks as off the device (``address.elsewhere``): then the texts sent are refused unless
allowed, and counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from minions.backends.address import elsewhere
from minions.backends.embeddings import (
    OllamaEmbedder,
    OnnxEmbedder,
    OpenAIEmbedder,
    SentenceTransformersEmbedder,
    _shipped_model,
    resolve_embedder,
)
from minions.backends.openai import key_for
from minions.documents import Document
from minions.errors import BackendConnectionError, ConfigError, ModelNotFoundError
from minions.protocols.library import Library
from tests.loopback import EmbeddingsServer, LoopbackServer, send_json, serving

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
    shipped = resolve_embedder()  # "auto": the test extra's wheel (bge-small is not downloaded here), through ONNX
    assert isinstance(shipped, OnnxEmbedder) and shipped.folder == _shipped_model()
    assert shipped.model == "all-MiniLM-L6-v2" and shipped.runtime == "openvino"  # the meaning extra installs it
    named = resolve_embedder(f"onnx/{_shipped_model()}")
    assert isinstance(named, OnnxEmbedder) and named.model == "all-MiniLM-L6-v2"
    with pytest.raises(ModelNotFoundError, match="not on disk"):
        resolve_embedder("onnx/no-such-org/no-such-model")


def test_a_custom_address_is_never_sent_the_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a recording server on 127.0.0.1 received in ``Authorization``: a placeholder with only OPENAI_API_KEY
    set, the key given for it (``api_key=``, ``MINIONS_EMBEDDINGS_KEY``) when one is, and OPENAI_API_KEY only where
    the user pointed OpenAI's own SDK (``OPENAI_BASE_URL``)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.delenv("MINIONS_EMBEDDINGS_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with serving(EmbeddingsServer()) as server:
        url = f"{server.url}/v1"
        resolve_embedder(f"openai-compatible/m@{url}").embed(["a"])  # type: ignore[union-attr]
        OpenAIEmbedder("m", url, api_key="sk-for-this-server").embed(["b"])
        monkeypatch.setenv("MINIONS_EMBEDDINGS_KEY", "sk-embeddings")
        resolve_embedder(f"openai-compatible/m@{url}").embed(["c"])  # type: ignore[union-attr]
        monkeypatch.delenv("MINIONS_EMBEDDINGS_KEY")
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        OpenAIEmbedder("m", url).embed(["d"])
    received = [(r.inputs, r.authorization) for r in server.requests]
    assert received == [
        (["a"], "Bearer not-needed"),
        (["b"], "Bearer sk-for-this-server"),
        (["c"], "Bearer sk-embeddings"),
        (["d"], "Bearer sk-openai-secret"),
    ]


def test_a_key_variable_goes_only_to_its_providers_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("GROQ_API_KEY", "gsk-groq")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert key_for("https://api.openai.com/v1") == key_for("https://api.openai.com/v1/") == "sk-openai"
    assert key_for("https://api.groq.com/openai/v1") == "gsk-groq"
    for custom in ["http://api.openai.com/v1", "https://api.openai.com.example.org/v1", "http://127.0.0.1:8080/v1"]:
        assert key_for(custom) is None
    assert key_for("http://127.0.0.1:8080/v1", "sk-given") == "sk-given"
    openai_spec = resolve_embedder("openai/text-embedding-3-small", allow_egress=True)
    assert isinstance(openai_spec, OpenAIEmbedder) and openai_spec.address == "https://api.openai.com/v1"


def test_a_model_on_another_machine_is_refused_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"not on this device.*allow_egress=True or MINIONS_EMBEDDINGS_EGRESS=1"):
        resolve_embedder("openai-compatible/m@http://10.1.2.3:8000/v1")
    allowed = resolve_embedder("openai-compatible/m@http://10.1.2.3:8000/v1", allow_egress=True)
    assert isinstance(allowed, OpenAIEmbedder) and allowed.leaves_device and allowed.sent.requests == 0
    monkeypatch.setenv("MINIONS_EMBEDDINGS_EGRESS", "1")
    assert resolve_embedder("ollama/nomic-embed-text@http://10.1.2.3:11434") is not None


@pytest.mark.slow
def test_a_real_server_embeds_and_what_leaves_is_counted(smollm2_gguf: Path) -> None:
    with run_server(smollm2_gguf, "--embedding", "true") as (url, _):
        here = OpenAIEmbedder("smollm2", url)
        vectors = here.embed(["Total revenue was $31.8 million.", "The auditor is KPMG.", "Revenue rose."])
        assert vectors.shape[0] == 3 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
        assert here.sent.requests == 0  # on loopback: nothing left the device
        with elsewhere(url):  # the same server, standing for one on another machine
            with pytest.raises(ConfigError, match="not on this device"):
                OpenAIEmbedder("smollm2", url)
            away = OpenAIEmbedder("smollm2", url, allow_egress=True)
        assert np.allclose(away.embed(["Total revenue was $31.8 million."]), vectors[:1], atol=1e-4)
        sent = away.sent
        assert (sent.requests, sent.texts, sent.bytes) == (1, 1, len(b"Total revenue was $31.8 million."))
        assert sent.tokens > 0 and sent.host == url.split("//")[1].split("/")[0]


@pytest.mark.slow
def test_loading_the_model_on_this_device_prints_nothing() -> None:
    """A command's output starts with its answer: the model's load draws no progress bar on stderr."""
    code = "from minions.backends.embeddings import resolve_embedder as r; print(r('auto').embed(['x']).shape)"
    env = {k: v for k, v in os.environ.items() if k != "MINIONS_EMBEDDINGS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().startswith("(1,"), proc.stderr[-2000:]
    assert "Loading" not in proc.stderr and "%|" not in proc.stderr


class OllamaEmbedServer(LoopbackServer):
    """Ollama's ``/api/embed`` as Ollama answers it (``embeddings``, one per input, and ``prompt_eval_count``),
    its vectors computed by a real sentence-embedding model (Ollama itself cannot be installed here); it records
    each request's inputs."""

    def __init__(self, model: SentenceTransformersEmbedder) -> None:
        super().__init__(_OllamaEmbedHandler)
        self.model = model
        self.inputs: list[list[str]] = []


class _OllamaEmbedHandler(BaseHTTPRequestHandler):
    server: OllamaEmbedServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/api/embed" or body.get("model") != "minilm":
            send_json(self, {"error": f"model '{body.get('model')}' not found"}, 404)
            return
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.server.inputs.append(texts)
        vectors = self.server.model.embed(texts)
        tokens = sum(len(t.split()) for t in texts)
        send_json(self, {"model": "minilm", "embeddings": vectors.tolist(), "prompt_eval_count": tokens})


@pytest.fixture(scope="module")
def shipped() -> SentenceTransformersEmbedder:
    model = resolve_embedder("sentence-transformers/" + str(_shipped_model()))
    assert isinstance(model, SentenceTransformersEmbedder)
    return model


@pytest.mark.slow
def test_a_library_embeds_through_ollama_and_finds_what_words_miss(
    shipped: SentenceTransformersEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library whose vectors come from an Ollama server, through the ``ollama`` SDK over HTTP: every chunk and
    the question are sent as Ollama takes them (then the best chunks' sentences, the model being on this device),
    and the passage that shares no word with the question is found."""
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path))  # no sentence cached by an earlier run
    with serving(OllamaEmbedServer(shipped)) as server:
        library = Library(None, embeddings=f"ollama/minilm@{server.url}")
        assert isinstance(library.embedder, OllamaEmbedder) and not library.embedder.leaves_device
        notes = [
            Document.from_text("The bank raised its interest rates twice this year.", name="bank.txt"),
            Document.from_text("A red car was parked outside the office every morning.", name="car.txt"),
            Document.from_text("The committee approved the budget for the next year.", name="budget.txt"),
        ]
        report = library.add(*notes)
        assert report.embedded == 3 and sum(len(i) for i in server.inputs) == 3
        found = library.search("Which automobile stood in front of the workplace?")
        assert found.ranking.ranked[0].chunk.document == "car.txt"
        assert found.ranking.about["meaning"] == "ollama/minilm"
        question, sentences = server.inputs[1:]  # after the chunks: the question alone, then the best chunks'
        assert question == ["Which automobile stood in front of the workplace?"]  # sentences (on this device)
        assert sorted(sentences) == sorted(n.text for n in notes)  # each note is one sentence
        assert library.embedder.sent.requests == 0  # on loopback: nothing left the device
        with pytest.raises(ModelNotFoundError, match="ollama pull other"):
            OllamaEmbedder("other", server.url).embed(["x"])
    with pytest.raises(BackendConnectionError, match="Cannot reach Ollama"):
        OllamaEmbedder("minilm", server.url).embed(["x"])  # the server is gone


@pytest.mark.slow
def test_an_ollama_server_on_another_machine_is_refused_unless_allowed_then_counted(
    shipped: SentenceTransformersEmbedder,
) -> None:
    with serving(OllamaEmbedServer(shipped)) as server, elsewhere(server.url) as there:
        with pytest.raises(ConfigError, match="not on this device"):
            Library(None, embeddings=f"ollama/minilm@{there}")
        away = OllamaEmbedder("minilm", there, allow_egress=True)
        texts = ["Total revenue was $31.8 million.", "The auditor is KPMG."]
        assert np.allclose(away.embed(texts), shipped.embed(texts), atol=1e-3)
        sent = away.sent
        assert (sent.requests, sent.texts, sent.bytes) == (1, 2, sum(len(t.encode()) for t in texts))
        assert sent.tokens == 9 and sent.host == there.split("//")[1]
