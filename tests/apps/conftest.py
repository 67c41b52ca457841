"""Fixtures for app tests: the app on scripted models, in-process or on a real port, and headless Chromium."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from minions.apps.config import AppConfig
from minions.apps.web import create_app

from .helpers import scripted_models

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1440,1000",
)  # fmt: skip

AppFactory = Callable[..., FastAPI]


@pytest.fixture
def make_app(tmp_path: Path) -> AppFactory:
    """``make_app(**config)``: the app over a fresh data folder, on scripted models unless given others."""

    def make(local: Any = None, remote: Any = None, **config: Any) -> FastAPI:
        if local is None and remote is None:
            local, remote = scripted_models()
        config.setdefault("data_dir", tmp_path / "data")
        return create_app(AppConfig(**config), local=local, remote=remote)

    return make


@pytest.fixture
def make_local_app(make_app: AppFactory, monkeypatch: pytest.MonkeyPatch) -> AppFactory:
    """``make_local_app(**config)``: the app on the scripted local model, with no remote model configured."""
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    return lambda **config: make_app(scripted_models()[0], None, **config)


@pytest.fixture
def client(make_app: AppFactory) -> Iterator[TestClient]:
    with TestClient(make_app(), base_url="http://127.0.0.1:8765") as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """uvicorn serving an app in a thread on a free port of 127.0.0.1."""

    def __init__(self, app: FastAPI) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def live_server(make_app: AppFactory) -> Iterator[LiveServer]:
    with LiveServer(make_app()) as server:
        yield server


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Debian Chromium through chromedriver (selenium); skipped where they are not installed."""
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        pytest.skip("needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium: pip install selenium")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="minions-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
