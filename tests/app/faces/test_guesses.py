"""Guessing the token (issue 48, break 3) and holding the server's doors open (its caps;
docs/security.md): every way of presenting a credential counts against one limit per client
address, the address is the connection's own unless a trusted proxy is configured, a lock
never locks out another client, and websockets, slow bodies and MCP sessions are capped."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.server_support import live_server, running_app
from tests.waiting import wait_until

TOKEN = "s3cret-token"
RIGHT = {"Authorization": f"Bearer {TOKEN}"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path / "data", token=TOKEN, login_attempts_per_minute=5, websockets_per_client=2,
                     bank_semantic_search=False) as c:
        yield c


def ws_refusal(client: TestClient, url: str, **kwargs: Any) -> WebSocketDisconnect:
    with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect(url, **kwargs) as ws:
        ws.receive_text()
    return refused.value


def test_every_door_counts_wrong_tokens_against_one_limit_per_address(client: TestClient) -> None:
    assert client.get("/api/sessions", headers={"Authorization": "Bearer guess-1"}).status_code == 401
    client.cookies.set("socratic_token", "123.forged")
    assert client.get("/api/sessions").status_code == 401
    client.cookies.clear()
    ws_refusal(client, "/ws/sessions/1?token=guess-3")
    assert client.post("/login", data={"token": "guess-4", "next": "/"}).status_code == 401
    mcp = client.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer sk-socratic-1-x"})
    assert mcp.status_code == 401
    # Five wrong, one through each door: now the right token from this address is refused everywhere.
    assert client.get("/api/sessions", headers=RIGHT).status_code == 429
    assert client.post("/login", data={"token": TOKEN, "next": "/"}).status_code == 429
    refused = ws_refusal(client, f"/ws/sessions/1?token={TOKEN}")
    assert refused.code == 1008 and "too many wrong tokens" in refused.reason
    again = client.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer anything"})
    assert again.status_code == 429 and again.headers["retry-after"] == "60"
    # Another client is not locked out by this one's guesses.
    other = TestClient(client.app, client=("10.0.0.9", 40000))
    assert other.get("/api/sessions", headers=RIGHT).status_code == 200


def test_a_right_token_counts_nothing_and_a_missing_one_is_not_a_guess(client: TestClient) -> None:
    for _ in range(20):
        assert client.get("/api/sessions", headers=RIGHT).status_code == 200
        assert client.get("/api/sessions").status_code == 401  # nothing presented: asked, not counted
    assert client.get("/api/sessions", headers=RIGHT).status_code == 200


def wrong_login(base: str, forwarded: str | None = None, token: str = "guess") -> int:
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    return httpx.post(f"{base}/login", data={"token": token, "next": "/"}, headers=headers, timeout=10,
                      follow_redirects=False).status_code


def test_a_forged_forwarded_address_neither_spreads_guesses_nor_unlocks_an_address(tmp_path: Path) -> None:
    env = {"SOCRATIC_TOKEN": TOKEN, "SOCRATIC_LOGIN_ATTEMPTS_PER_MINUTE": "3"}
    with live_server(tmp_path / "a", env=env) as base:
        for k in range(3):
            assert wrong_login(base, f"203.0.113.{k}") == 401
        assert wrong_login(base, "203.0.113.77") == 429  # every guess counted for 127.0.0.1
        assert wrong_login(base, "198.51.100.1", TOKEN) == 429  # the right token with a forged address too


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_count(tmp_path: Path) -> None:
    env = {"SOCRATIC_TOKEN": TOKEN, "SOCRATIC_LOGIN_ATTEMPTS_PER_MINUTE": "3"}
    with live_server(tmp_path / "b", "--forwarded-allow-ips", "127.0.0.1", env=env) as base:
        for _ in range(3):
            assert wrong_login(base, "203.0.113.5") == 401
        assert wrong_login(base, "203.0.113.5", TOKEN) == 429  # the guesser is locked
        assert wrong_login(base, "198.51.100.1", TOKEN) == 303  # everyone else behind the proxy is not


# -- caps -------------------------------------------------------------------------------------------


def test_websockets_per_client_are_capped_with_a_reason(client: TestClient) -> None:
    sid = client.post("/api/sessions", headers=RIGHT, json={"title": "t", "agent": "offline",
                                                            "candidate_kind": "cuda", "start": False}).json()["id"]
    url = f"/ws/sessions/{sid}?token={TOKEN}"
    with client.websocket_connect(url) as first, client.websocket_connect(url) as second:
        assert "session-header" in first.receive_text() and "session-header" in second.receive_text()
        refused = ws_refusal(client, url)
        assert refused.code == 1013 and "SOCRATIC_WEBSOCKETS_PER_CLIENT" in refused.reason
    with client.websocket_connect(url) as again:  # closed ones are counted off
        assert "session-header" in again.receive_text()


def slow_body(port: int) -> socket.socket:
    """A POST whose body never finishes: headers, then 10 of its 100 bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{\"title\": ")
    return s


def test_a_body_that_does_not_arrive_in_time_gets_408(tmp_path: Path) -> None:
    with live_server(tmp_path, env={"SOCRATIC_BODY_TIMEOUT_S": "1"}) as base:
        port = int(base.rsplit(":", 1)[1])
        s = slow_body(port)
        try:  # the server answers without the rest of the body; its answer may come in parts
            reply = ""
            while "SOCRATIC_BODY_TIMEOUT_S" not in reply:
                part = s.recv(4096).decode()
                if not part:
                    break
                reply += part
        finally:
            s.close()
        assert reply.startswith("HTTP/1.1 408") and "SOCRATIC_BODY_TIMEOUT_S" in reply, reply
        assert httpx.get(f"{base}/api/health", timeout=5).status_code == 200


def test_one_address_sending_many_bodies_at_once_gets_429(tmp_path: Path) -> None:
    from app.faces.web.request_limits import BODIES_PER_CLIENT

    with live_server(tmp_path, env={"SOCRATIC_BODY_TIMEOUT_S": "60"}) as base:
        port = int(base.rsplit(":", 1)[1])
        held = [slow_body(port) for _ in range(BODIES_PER_CLIENT)]
        try:
            def refused() -> bool:
                r = httpx.post(f"{base}/api/sessions", json={"title": "t"}, timeout=10)
                return r.status_code == 429 and "still sending their bodies" in r.text

            wait_until(refused, 20, "a 429 for one body too many")
        finally:
            for s in held:
                s.close()
        wait_until(lambda: httpx.post(f"{base}/api/sessions", json={"title": "x", "agent": "offline",
                                                                   "candidate_kind": "cuda", "start": False},
                                      timeout=10).status_code == 201, 20, "bodies accepted again")


def test_mcp_sessions_are_capped_with_429(tmp_path: Path) -> None:
    with live_server(tmp_path, env={"SOCRATIC_MCP_SESSIONS_MAX": "2"}) as base:
        sid = httpx.post(f"{base}/api/sessions", json={"title": "m", "agent": "mcp", "candidate_kind": "cuda",
                                                       "start": False}, timeout=10).json()["id"]
        token = httpx.get(f"{base}/api/sessions/{sid}/mcp", timeout=10).json()["token"]
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        for _ in range(2):
            r = httpx.post(f"{base}/mcp", content=json.dumps(INITIALIZE), headers=headers, timeout=10)
            assert r.status_code == 200 and r.headers.get("mcp-session-id"), r.text
        r = httpx.post(f"{base}/mcp", content=json.dumps(INITIALIZE), headers=headers, timeout=10)
        assert r.status_code == 429 and "SOCRATIC_MCP_SESSIONS_MAX" in r.text
        assert httpx.get(f"{base}/api/health", timeout=5).status_code == 200
