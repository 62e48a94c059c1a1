"""Issue 48's two 500s (break 5) and the weak spots it closed (docs/security.md): each test
states the behaviour that the audit found missing."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.faces.commands.serve import main_settings_error
from app.faces.web.security import cookie_value
from app.settings import PROJECT_ROOT, Settings
from tests.app.faces.test_hardening import tiny_trace, upload
from tests.server_support import CHROMIUM, CHROMIUM_ARGS, live_server, running_app
from tests.waiting import wait_until

EXAMPLE = PROJECT_ROOT / "examples" / "h200-offline-silent.jsonl"
TOKEN = "s3cret"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path / "data", bank_semantic_search=False) as c:
        yield c


# -- break 5: the two 500s ---------------------------------------------------------------------------


def test_a_bank_edit_that_nulls_a_required_field_is_a_422(client: TestClient) -> None:
    qid = client.get("/api/bank/questions").json()[0]["id"]
    for field in ("text", "kind", "triggers", "layers", "archs", "hypothesis", "check", "provenance"):
        r = client.patch(f"/api/bank/questions/{qid}", json={field: None})
        assert r.status_code == 422 and "may not be null" in r.text, (field, r.status_code, r.text[:200])
    cleared = client.patch(f"/api/bank/questions/{qid}", json={"problem": None})
    assert cleared.status_code == 200 and cleared.json()["problem"] is None


def test_a_fork_through_the_api_gets_its_runner_and_writes_private_files(tmp_path: Path) -> None:
    """`POST .../fork` with `{}` once ran in the thread pool, failed to start the runner after the
    commit (500) and left the fork "running" with nothing running it. Here, on a real server
    over a data folder left 0755 by hand: the fork runs, its kernel source is 0600, the folder 0700."""
    data = tmp_path / "data"
    done = subprocess.run([sys.executable, "-m", "app", "trace", "import", str(EXAMPLE), "--data-dir", str(data)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data.chmod(0o755)
    with live_server(data) as base:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        r = httpx.post(f"{base}/api/sessions/1/candidates/1/fork", json={}, timeout=30)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]

        def agent_stepped() -> bool:
            events = httpx.get(f"{base}/api/sessions/{sid}/events", timeout=10).json()
            return "agent_step" in [e["kind"] for e in events]

        wait_until(agent_stepped, 60, "the fork's runner to take its first step")
        sources = wait_until(lambda: list((data / "candidates").rglob("*.cu")), 60, "a candidate source")
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in sources)


# -- Host and Origin --------------------------------------------------------------------------------------


def test_a_host_header_with_anything_but_a_name_and_a_port_gets_421(client: TestClient) -> None:
    for host in ("localhost:evil", "127.0.0.1:80@evil.example", "localhost:80:80", "127.0.0.1/evil.example",
                 "user@localhost", "localhost:", "[::1]:x"):
        assert client.get("/api/health", headers={"host": host}).status_code == 421, host
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "testserver"):
        assert client.get("/api/health", headers={"host": host}).status_code == 200, host


def test_an_origin_with_another_scheme_is_another_origin(client: TestClient) -> None:
    sid = client.post("/api/sessions", json={"title": "t", "agent": "offline", "candidate_kind": "cuda",
                                             "start": False}).json()["id"]
    for origin in ("https://testserver", "ws://testserver", "http://testserver/evil"):
        r = client.post(f"/api/sessions/{sid}/stop", json={}, headers={"origin": origin})
        assert r.status_code == 403, origin
    with pytest.raises(WebSocketDisconnect), client.websocket_connect(
            f"/ws/sessions/{sid}", headers={"origin": "https://testserver"}) as ws:
        ws.receive_text()
    assert client.post(f"/api/sessions/{sid}/stop", json={}, headers={"origin": "http://testserver"}).status_code \
        in (200, 409)


def test_json_in_any_letter_case_is_scanned_for_depth(client: TestClient) -> None:
    deep = "[" * 100 + "]" * 100
    for kind in ("application/JSON", "Application/Json; charset=utf-8"):
        r = client.post("/api/sessions", content=deep, headers={"content-type": kind})
        assert r.status_code == 422 and "nested more than" in r.text, (kind, r.status_code)


# -- the pages' policy ------------------------------------------------------------------------------------


def test_the_content_security_policy_names_only_this_server(client: TestClient) -> None:
    r = client.get("/", headers={"accept": "text/html"})
    policy = {d.split()[0]: d.split()[1:] for d in r.headers["content-security-policy"].split("; ")}
    assert policy["connect-src"] == ["'self'"]  # no ws: or wss: to any host
    assert policy["style-src"] == ["'self'"]  # no 'unsafe-inline'
    assert policy["base-uri"] == ["'none'"] and policy["form-action"] == ["'self'"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert r.headers["referrer-policy"] == "same-origin"


def test_no_template_needs_inline_style() -> None:
    """What lets the CSP drop style-src 'unsafe-inline': colours from data are SVG fills, and
    htmx is told not to add its indicator style."""
    for template in (PROJECT_ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        assert " style=" not in text and "<style" not in text, template
    assert '"includeIndicatorStyles": false' in (PROJECT_ROOT / "templates" / "base.html").read_text()


# -- the sign-in cookie -------------------------------------------------------------------------------------


@pytest.fixture
def signed(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path / "data", token=TOKEN, cookie_max_age_s=3600, bank_semantic_search=False) as c:
        yield c


def test_the_sign_in_cookie_expires(signed: TestClient) -> None:
    r = signed.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
    assert "max-age=3600" in r.headers["set-cookie"].lower()
    settings = Settings(token=TOKEN)
    signed.cookies.clear()
    signed.cookies.set("socratic_token", cookie_value(settings, int(time.time()) - 3700))  # past its hour
    assert signed.get("/api/sessions").status_code == 401
    signed.cookies.set("socratic_token", cookie_value(settings, int(time.time()) - 60))
    assert signed.get("/api/sessions").status_code == 200


def test_an_aging_cookie_is_reissued(signed: TestClient) -> None:
    old = cookie_value(Settings(token=TOKEN), int(time.time()) - 2000)  # past half of its hour
    signed.cookies.set("socratic_token", old)
    r = signed.get("/api/sessions")
    assert r.status_code == 200 and "socratic_token=" in r.headers.get("set-cookie", "")
    assert old not in r.headers["set-cookie"]


def test_signing_out_revokes_the_cookie_even_where_it_was_copied(signed: TestClient) -> None:
    signed.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
    copied = signed.cookies.get("socratic_token")
    assert copied and signed.get("/api/sessions").status_code == 200
    assert 'action="/logout"' in signed.get("/", headers={"accept": "text/html"}).text
    out = signed.post("/logout", follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    signed.cookies.clear()
    signed.cookies.set("socratic_token", copied)
    assert signed.get("/api/sessions").status_code == 401


def test_the_cookie_is_secure_over_https(tmp_path: Path) -> None:
    settings = {"token": TOKEN, "bank_semantic_search": False}
    with running_app(tmp_path / "data", **settings) as plain:
        assert "secure" not in plain.post("/login", data={"token": TOKEN}, follow_redirects=False
                                          ).headers["set-cookie"].lower()
        secure = TestClient(plain.app, base_url="https://testserver")
        cookie = secure.post("/login", data={"token": TOKEN}, follow_redirects=False).headers["set-cookie"]
        assert "; secure" in cookie.lower()


# -- the token off the command line ----------------------------------------------------------------------------


def test_the_token_comes_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    assert main_settings_error(["serve", "--host", "0.0.0.0", "--token-file", str(token_file)]) == ""
    assert Settings(token_file=token_file).token_value == "from-a-file"
    monkeypatch.setenv("SOCRATIC_TOKEN_FILE", str(token_file))
    assert Settings().token_value == "from-a-file"
    monkeypatch.delenv("SOCRATIC_TOKEN_FILE")
    (tmp_path / "empty").write_text("\n")
    assert "is empty" in main_settings_error(["serve", "--host", "0.0.0.0", "--token-file", str(tmp_path / "empty")])
    assert "cannot be read" in main_settings_error(["serve", "--host", "0.0.0.0", "--token-file",
                                                    str(tmp_path / "missing")])


def test_a_token_on_the_command_line_is_warned_about(tmp_path: Path) -> None:
    with socket.socket() as taken:  # a port already in use: the command stops after its warnings
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = subprocess.run([sys.executable, "-m", "app", "serve", "--token", "visible", "--port", port,
                               "--data-dir", str(tmp_path)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=60)
    assert "visible to every user of this machine" in done.stderr


# -- read-only sessions ----------------------------------------------------------------------------------------


def test_an_imported_session_takes_no_auto_ask_policy(client: TestClient) -> None:
    assert upload(client, tiny_trace()).status_code == 303
    r = client.put("/api/sessions/1/auto-ask", json={"mode": "at_once"})
    assert r.status_code == 409 and "read-only" in r.text
    assert client.get("/api/sessions/1/auto-ask").json()["mode"] == "off"


def test_mcp_calls_on_an_imported_session_are_refused_at_once(client: TestClient) -> None:
    assert upload(client, tiny_trace(agent="mcp", status="paused")).status_code == 303
    refusal: Any = client.app.state.mcp._refusal(1)  # type: ignore[attr-defined]
    assert "imported from a trace and is read-only" in refusal
    assert json.dumps(refusal)


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="the system Chromium is not installed")
def test_chromium_reports_no_policy_violation_on_the_pages_that_draw_data_colours(tmp_path: Path) -> None:
    """The CSP without 'unsafe-inline' styles and with connect-src 'self' in a real browser: the
    compare page's heat cells and swatches, a candidate's legend, a session page's websocket."""
    from playwright.sync_api import sync_playwright

    data = tmp_path / "data"
    for example in sorted((PROJECT_ROOT / "examples").glob("*.jsonl")):
        done = subprocess.run([sys.executable, "-m", "app", "trace", "import", str(example), "--data-dir", str(data)],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    with live_server(data) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            violations: list[str] = []
            page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
            for path in ("/compare?s=1&s=2", "/sessions/1/audit/candidates/1", "/sessions/1/audit", "/sessions/1"):
                page.goto(base + path)
                page.wait_for_load_state("networkidle")
            # The session page (last) opened its websocket: a refused connect-src would be reported too.
            page.goto(base + "/compare?s=1&s=2")
            assert page.locator(".heat-box .heat-fill rect").count() > 0
            assert not violations, violations
        finally:
            browser.close()
