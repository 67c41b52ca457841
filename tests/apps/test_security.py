"""Who may talk to the app, from where, and with how large an upload."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from minions.apps.config import AppConfig, is_loopback
from minions.errors import ConfigError

from .conftest import AppFactory
from .helpers import make_pdf, report_pages

TOKEN = "s3cret-token-123"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.org"])
def test_binding_beyond_loopback_needs_a_token(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINIONS_APP_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="without a token"):
        AppConfig(host=host)
    assert AppConfig(host=host, token=TOKEN).token == TOKEN
    monkeypatch.setenv("MINIONS_APP_TOKEN", TOKEN)
    assert AppConfig.from_env(host=host).token == TOKEN


def test_loopback_names_and_short_tokens() -> None:
    assert all(is_loopback(h) for h in ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"])
    assert not any(is_loopback(h) for h in ["0.0.0.0", "10.0.0.1", "evil.example", ""])
    with pytest.raises(ConfigError, match="too short"):
        AppConfig(token="abc")


def test_with_a_token_every_request_needs_it(make_app: AppFactory) -> None:
    with TestClient(make_app(token=TOKEN), base_url="http://127.0.0.1:8765") as client:
        for path in ["/", "/static/app.js", "/api/documents", "/v1/models"]:
            response = client.get(path)
            assert response.status_code == 401, path
            assert "Missing or wrong token" in response.json()["error"]["message"]
        assert client.get("/api/documents", headers={"Authorization": "Bearer wrong-token-1"}).status_code == 401
        assert client.get("/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_browser_trades_the_token_in_the_address_for_a_cookie(make_app: AppFactory) -> None:
    with TestClient(make_app(token=TOKEN), base_url="http://127.0.0.1:8765") as client:
        assert client.get("/?token=wrong", follow_redirects=False).status_code == 401
        response = client.get(f"/?token={TOKEN}", follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert client.get("/").status_code == 200  # the client kept the cookie
        assert client.get("/api/documents").status_code == 200


def test_other_sites_and_rebound_host_names_are_refused(client: TestClient) -> None:
    evil = client.post("/api/conversations", headers={"Origin": "http://evil.example"})
    assert evil.status_code == 403 and "Cross-origin" in evil.json()["error"]["message"]
    assert client.post("/api/conversations", headers={"Origin": "null"}).status_code == 403
    assert client.post("/api/conversations", headers={"Origin": "http://127.0.0.1:8765"}).status_code == 200
    rebound = client.get("/api/documents", headers={"Host": "attacker.example:8765"})
    assert rebound.status_code == 403 and "loopback" in rebound.json()["error"]["message"]


def test_uploads_must_declare_a_size_under_the_limit(make_app: AppFactory) -> None:
    with TestClient(make_app(max_upload_bytes=10_000), base_url="http://127.0.0.1:8765") as client:
        big = client.post("/api/documents", files={"files": ("big.txt", b"x" * 2_000_000)})
        assert big.status_code == 413 and "larger than the limit" in big.json()["error"]["message"]
        over = client.post("/api/documents", files={"files": ("big.txt", b"x" * 10_001)})
        assert over.status_code == 413 and "upload limit" in over.json()["error"]["message"]
        unsized = client.post(
            "/api/documents", content=iter([b"--x\r\n"]), headers={"Content-Type": "multipart/form-data; boundary=x"}
        )
        assert unsized.status_code == 411
        assert client.post("/api/documents", files={"files": ("r.pdf", make_pdf(report_pages()))}).status_code == 200
