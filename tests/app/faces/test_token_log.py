"""The token never reaches the log (issue 48, break 4; docs/security.md): a real `socratic serve`
with a token, every kind of request that can carry it (a header, the sign-in form, a websocket
query however its name is encoded, a page or API query, a path, MCP), right and wrong; then the
whole log is searched for the token in every spelling."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import connect

from app.faces.web.security import RedactTokens, redact
from app.settings import PROJECT_ROOT
from tests.server_support import free_port
from tests.waiting import wait_until

TOKEN = "s3cret+tok/en=42"  # characters that percent-encoding changes


def spellings(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), quote_plus(secret), quote(secret)}


def test_a_percent_encoded_query_key_is_redacted_like_the_plain_one() -> None:
    for query in ("token=SECRET", "%74oken=SECRET", "tok%65n=SECRET", "%54OKEN=SECRET", "+token=SECRET",
                  "after=3&%74%6f%6b%65%6e=SECRET&x=1"):
        line = redact(f'127.0.0.1:5000 - "GET /ws/sessions/1?{query} HTTP/1.1" 101')
        assert "SECRET" not in line and "[redacted]" in line, query
    assert "after=3" in redact("/ws/sessions/1?after=3&token=SECRET")
    record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, "%s - \"WebSocket %s\" %s",
                               ("127.0.0.1:1", f"/ws/x?q={quote(TOKEN, safe='')}", "403"), None)
    RedactTokens((TOKEN,)).filter(record)
    assert not any(s in record.getMessage() for s in spellings(TOKEN)), record.getMessage()


def test_a_real_server_logs_no_spelling_of_the_token_after_any_kind_of_request(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port), "--token-file",
                                 str(token_file), "--data-dir", str(tmp_path / "data")],
                                cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            def up() -> bool:
                try:
                    return httpx.get(f"{base}/api/health", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(up, 60, "the server to answer")
            auth = {"Authorization": f"Bearer {TOKEN}"}
            r = httpx.post(f"{base}/api/sessions", headers=auth,
                           json={"title": "t", "agent": "mcp", "candidate_kind": "cuda", "start": False})
            assert r.status_code == 201, r.text
            encoded = quote(TOKEN, safe="")
            for query in (f"token={encoded}", f"%74oken={encoded}", f"tok%65n={encoded}", f"TOKEN={encoded}"):
                assert httpx.get(f"{base}/api/health?{query}").status_code == 200
                assert httpx.get(f"{base}/api/sessions?{query}").status_code == 401  # never from a query here
                try:
                    with connect(f"ws://127.0.0.1:{port}/ws/sessions/1?after=0&{query}") as ws:
                        assert "session-header" in str(ws.recv(timeout=30))
                except (InvalidStatus, WebSocketException):
                    pass  # a name Starlette does not decode to "token" opens nothing; it is logged all the same
            assert httpx.get(f"{base}/api/{encoded}").status_code == 401
            assert httpx.get(f"{base}/api/{encoded}", headers=auth).status_code == 404
            assert httpx.get(f"{base}/sessions/{TOKEN}", headers=auth).status_code in (404, 422)
            login = httpx.post(f"{base}/login", data={"token": TOKEN, "next": f"/?token={encoded}"})
            assert login.status_code in (200, 303)
            assert httpx.post(f"{base}/login", data={"token": TOKEN + "x", "next": "/"}).status_code == 401
            assert httpx.get(f"{base}/api/sessions", headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 401
            mcp = httpx.get(f"{base}/api/sessions/1/mcp", headers=auth).json()["token"]
            httpx.post(f"{base}/mcp", headers={"Authorization": f"Bearer {mcp}", "Accept": "application/json"},
                       content=b"{}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = log_path.read_text()
    assert "[redacted]" in text and "/ws/sessions/1" in text, text[-2000:]
    leaked = [s for s in spellings(TOKEN) if s in text]
    assert not leaked, f"the log holds the token as {leaked}:\n{text[-3000:]}"
