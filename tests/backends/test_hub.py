"""``minions models pull`` against a fake Hugging Face Hub on 127.0.0.1 (no internet here).

The fake serves the endpoints ``huggingface_hub`` calls for a download: the model's file list with LFS sha256
(``/api/models/<repo>/revision/<rev>?blobs=true``) and ``/<repo>/resolve/<rev>/<file>`` (HEAD with the
``X-Linked-Etag``/``X-Repo-Commit`` headers, GET with ``Range``). It can cut the connection part way through a
file and advertise a wrong checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from minions.apps.cli.main import main
from minions.backends.hub import find_pulled, list_pulled, parse_spec, pull, quantization_of
from minions.backends.model_files import resolve_model_path
from minions.errors import ConfigError, DownloadError, ModelNotFoundError
from tests.loopback import LoopbackServer, serving

REPO = "test-org/Tiny-3B-Instruct-GGUF"
FILE = "Tiny-3B-Instruct-Q4_K_M.gguf"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SIZE = 3 * 1024 * 1024


class FakeHub(LoopbackServer):
    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(HubHandler)
        self.files = files
        self.advertised: dict[str, str] = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        self.cut_after: int | None = None  # the first GET of a file stops after this many bytes
        self.gets: list[str | None] = []  # the Range header of each GET of a file
        self.bytes_sent = 0


class HubHandler(BaseHTTPRequestHandler):
    server: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _file(self) -> tuple[str, bytes] | None:
        match = re.fullmatch(rf"/{re.escape(REPO)}/resolve/{REVISION}/(.+)", self.path.split("?")[0])
        if match and match.group(1) in self.server.files:
            return match.group(1), self.server.files[match.group(1)]
        self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        return None

    def _file_headers(self, name: str, data: bytes) -> None:
        sha = self.server.advertised[name]
        self.send_header("X-Repo-Commit", REVISION)
        self.send_header("X-Linked-Etag", f'"{sha}"')
        self.send_header("ETag", f'"{sha}"')
        self.send_header("X-Linked-Size", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")

    def do_HEAD(self) -> None:
        if found := self._file():
            self.send_response(200)
            self._file_headers(*found)
            self.send_header("Content-Length", str(len(found[1])))
            self.end_headers()

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.startswith("/api/models/"):
            return self._model_info(path)
        if not (found := self._file()):
            return
        name, data = found
        ranged = self.headers.get("Range")
        self.server.gets.append(ranged)
        start = int(re.match(r"bytes=(\d+)-", ranged).group(1)) if ranged else 0  # type: ignore[union-attr]
        self.send_response(206 if ranged else 200)
        self._file_headers(name, data)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        cut, self.server.cut_after = self.server.cut_after, None
        if cut is not None:  # a dropped connection: part of the body, then a reset
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.server.bytes_sent += cut
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(body)
        self.server.bytes_sent += len(body)

    def _model_info(self, path: str) -> None:
        repo = path.removeprefix("/api/models/").split("/revision/")[0]
        if repo != REPO:
            self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            return
        siblings = [{"rfilename": "README.md", "size": 12, "blobId": "b" * 40}] + [
            {
                "rfilename": name,
                "size": len(data),
                "blobId": "c" * 40,
                "lfs": {"sha256": self.server.advertised[name], "size": len(data), "pointerSize": 134},
            }
            for name, data in self.server.files.items()
        ]
        self._json(200, {"id": REPO, "modelId": REPO, "sha": REVISION, "private": False, "siblings": siblings})


def gguf_bytes(size: int, seed: int = 0) -> bytes:
    return b"GGUF" + random.Random(seed).randbytes(size - 4)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with serving(FakeHub({FILE: gguf_bytes(SIZE)})) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_pull_downloads_checks_and_makes_the_model_usable(hub: FakeHub, capfd: pytest.CaptureFixture[str]) -> None:
    model = pull(f"{REPO}/{FILE}")
    assert Path(model.path).read_bytes() == hub.files[FILE]
    assert (model.name, model.quantization, model.size, model.revision) == (
        "Tiny-3B-Instruct-Q4_K_M", "Q4_K_M", SIZE, REVISION
    )  # fmt: skip
    assert model.sha256 == hashlib.sha256(hub.files[FILE]).hexdigest()
    assert "100%" in capfd.readouterr().err  # the progress bar ran to the end
    assert [m.name for m in list_pulled()] == ["Tiny-3B-Instruct-Q4_K_M"]
    # usable as llamacpp/<name>, with or without .gguf, or as the repository path
    for name in ("Tiny-3B-Instruct-Q4_K_M", FILE, f"{REPO}/{FILE}"):
        assert resolve_model_path(name) == Path(model.path)
    again = pull(REPO)  # the only GGUF file of the repository; already there: not downloaded again
    assert again.path == model.path and len(hub.gets) == 1


def test_a_cut_connection_resumes_where_it_stopped(hub: FakeHub) -> None:
    size = 12 * 1024 * 1024  # more than huggingface_hub's write chunk (10 MiB): the part before the cut is kept
    hub.files = {FILE: gguf_bytes(size, seed=1)}
    hub.advertised = {FILE: hashlib.sha256(hub.files[FILE]).hexdigest()}
    hub.cut_after = cut = 11 * 1024 * 1024
    model = pull(f"{REPO}/{FILE}", progress=False)
    assert Path(model.path).read_bytes() == hub.files[FILE]
    first, second = hub.gets
    resumed_at = int(second.removeprefix("bytes=").removesuffix("-"))  # the second request asked for the rest only
    assert first is None and 0 < resumed_at <= cut
    assert hub.bytes_sent == cut + size - resumed_at < 1.2 * size


def test_a_pull_killed_mid_way_resumes_in_the_next_one(hub: FakeHub) -> None:
    target = Path(os.environ["MINIONS_CACHE_DIR"]) / "models" / REPO / FILE
    target.parent.mkdir(parents=True)
    have = SIZE // 3
    target.with_name(FILE + ".part").write_bytes(hub.files[FILE][:have])  # what a process killed mid-way left
    model = pull(f"{REPO}/{FILE}", progress=False)
    assert Path(model.path).read_bytes() == hub.files[FILE]
    assert hub.gets == [f"bytes={have}-"] and hub.bytes_sent == SIZE - have
    assert not target.with_name(FILE + ".part").exists()


def test_a_wrong_checksum_is_refused_and_nothing_is_kept(hub: FakeHub) -> None:
    hub.advertised[FILE] = hashlib.sha256(b"another file").hexdigest()
    with pytest.raises(DownloadError, match=r"does not match the hub's checksum.*deleted"):
        pull(f"{REPO}/{FILE}", progress=False)
    assert list_pulled() == [] and find_pulled(FILE) is None
    assert not list(Path(os.environ["MINIONS_CACHE_DIR"]).rglob(FILE))
    with pytest.raises(ModelNotFoundError):
        resolve_model_path("Tiny-3B-Instruct-Q4_K_M")


def test_which_file_of_a_repository(hub: FakeHub) -> None:
    hub.files = {name: gguf_bytes(1024, seed=i) for i, name in enumerate(("m-Q8_0.gguf", "m-Q4_K_M.gguf"))}
    hub.advertised = {name: hashlib.sha256(data).hexdigest() for name, data in hub.files.items()}
    assert pull(REPO, progress=False).filename == "m-Q4_K_M.gguf"  # the preferred quantization among several
    hub.files["m-Q4_K_M-v2.gguf"] = hub.files["m-Q4_K_M.gguf"]
    hub.advertised["m-Q4_K_M-v2.gguf"] = hub.advertised["m-Q4_K_M.gguf"]
    with pytest.raises(ConfigError, match=r"holds 3 GGUF files: pull one as .*/FILE, one of m-Q4_K_M-v2\.gguf"):
        pull(REPO, progress=False)
    with pytest.raises(ModelNotFoundError, match="No repository test-org/nope"):
        pull("test-org/nope", progress=False)
    with pytest.raises(ModelNotFoundError, match="has no file"):
        pull(f"{REPO}/missing-Q4_0.gguf", progress=False)


def test_an_unreachable_hub_says_so(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    with pytest.raises(DownloadError, match=rf"Cannot reach {dead} to pull {REPO}.*HF_ENDPOINT"):
        pull(REPO, progress=False)


def test_cli_pull_then_list(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", f"{REPO}/{FILE}"]) == 0
    assert "llamacpp/Tiny-3B-Instruct-Q4_K_M" in capsys.readouterr().out
    assert main(["models", "--json"]) == 0
    listed = {m["spec"]: m for m in json.loads(capsys.readouterr().out)}
    entry = listed["llamacpp/Tiny-3B-Instruct-Q4_K_M"]
    assert entry["available"] and "Q4_K_M" in entry["detail"] and "3.1 MB" in entry["detail"]


def test_spec_and_quantization_parsing() -> None:
    assert parse_spec("org/Repo-GGUF") == ("org/Repo-GGUF", None)
    assert parse_spec("org/Repo-GGUF/sub/m-Q4_0.gguf") == ("org/Repo-GGUF", "sub/m-Q4_0.gguf")
    with pytest.raises(ConfigError, match="owner/repo"):
        parse_spec("just-a-name")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        parse_spec("org/Repo/model.safetensors")
    names = ["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-3b-instruct-q4_k_m.gguf", "LFM2-1.2B-IQ4_XS.gguf"]
    assert [quantization_of(n) for n in [*names, "m-bf16.gguf", "model.gguf"]] == [
        "Q4_1", "Q4_K_M", "IQ4_XS", "BF16", "unknown"
    ]  # fmt: skip
