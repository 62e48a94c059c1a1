"""Safety: loopback by default; any other bind needs a token, which pages, the API and the
websocket then require; cross-origin writes are refused; pages carry a strict CSP."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

from app.faces.commands.serve import main_settings_error
from app.settings import Settings, is_loopback
from tests.server_support import running_app


def test_loopback_is_the_default_and_other_binds_need_a_token() -> None:
    assert Settings().host == "127.0.0.1"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    with pytest.raises(ValidationError, match="set SOCRATIC_TOKEN"):
        Settings(host="0.0.0.0")
    assert Settings(host="0.0.0.0", token="s3cret").token_value == "s3cret"


def test_serve_refuses_a_public_bind_without_a_token() -> None:
    assert "set SOCRATIC_TOKEN" in main_settings_error(["serve", "--host", "0.0.0.0"])


def test_with_a_token_everything_but_sign_in_requires_it(tmp_path: Path) -> None:
    with running_app(tmp_path, token="s3cret") as client:
        assert client.get("/api/sessions").status_code == 401
        assert client.get("/api/sessions", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/api/sessions", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        r = client.get("/", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        assert client.get("/static/app.css").status_code == 200
        with pytest.raises(WebSocketDisconnect), client.websocket_connect("/ws/sessions/1") as ws:
            ws.receive_text()
        bad = client.post("/login", data={"token": "nope", "next": "/"})
        assert bad.status_code == 401
        good = client.post("/login", data={"token": "s3cret", "next": "/"}, follow_redirects=False)
        assert good.status_code == 303 and "socratic_token" in good.headers["set-cookie"]
        assert "samesite=strict" in good.headers["set-cookie"].lower()
        assert client.get("/").status_code == 200  # the cookie now opens the pages


def test_cross_origin_writes_and_websockets_are_refused(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={"title": "x"}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
        assert client.get("/api/sessions").json() == []
        with pytest.raises(WebSocketDisconnect), client.websocket_connect(
                "/ws/sessions/1", headers={"Origin": "http://evil.example"}) as ws:
            ws.receive_text()


def test_pages_forbid_inline_scripts_and_framing(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        r = client.get("/")
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"
        assert "https://" not in r.text and "http://" not in r.text.replace("http://127.0.0.1", "")
