"""Another web page in the user's browser cannot read or drive the server (docs/security.md).
The system Chromium visits (1) a page served from another port on loopback, and (2) a page
of a DNS-rebinding attacker: a name that the browser resolves to 127.0.0.1 (Chromium's host
resolver rules), so that the attacker's page and the server share an origin. Neither reads
the question bank or a session, pauses a session, or opens its websocket."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, free_port, live_server

pytestmark = BROWSER_MARKS

# The attack: read the bank and a session, pause the session, listen on its websocket.
ATTACK = """<!doctype html><title>cute cats</title><script>
const target = "%(target)s";
const results = {};
async function attempt(name, f) {
  try { results[name] = await f(); } catch (e) { results[name] = "blocked: " + e.name; }
}
(async () => {
  await attempt("read_bank", async () => { const r = await fetch(target + "/api/bank/export");
                                           return r.status + " " + (await r.text()).slice(0, 80); });
  await attempt("read_session", async () => { const r = await fetch(target + "/api/sessions/1");
                                              return r.status + " " + (await r.text()).slice(0, 80); });
  await attempt("pause", async () => { const r = await fetch(target + "/api/sessions/1/pause",
      {method: "POST", mode: "%(mode)s", headers: {"Content-Type": "text/plain"}, body: "{}"});
      return r.type + " " + r.status; });
  await attempt("socket", () => new Promise(resolve => {
    const ws = new WebSocket(target.replace("http", "ws") + "/ws/sessions/1");
    let got = 0;
    ws.onmessage = () => { got += 1; };
    ws.onclose = () => resolve("closed after " + got + " messages");
    setTimeout(() => resolve("open after " + got + " messages"), 5000);
  }));
  window.results = results;
})();
</script>"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(tmp_path / "data", env={"SOCRATIC_BANK_SEMANTIC_SEARCH": "false"}) as base:
        r = httpx.post(f"{base}/api/sessions", json={"title": "victim", "agent": "offline", "candidate_kind": "cuda"})
        assert r.status_code == 201, r.text
        yield base


@pytest.fixture
def other_origin(tmp_path: Path, server: str) -> Iterator[str]:
    """A plain web server on another loopback port, serving the attacker's page."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(ATTACK % {"target": server, "mode": "no-cors"})
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()),
                                partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def run_attack(page: Any, url: str) -> dict[str, str]:
    page.goto(url)
    page.wait_for_function("window.results !== undefined", timeout=30_000)
    return dict(page.evaluate("window.results"))


def assert_unharmed(server: str) -> None:
    state = httpx.get(f"{server}/api/sessions/1").json()
    assert state["status"] == "running" and state["open_trigger_id"] is None
    assert httpx.get(f"{server}/api/sessions/1/triggers").json() == []


def test_a_page_on_another_port_can_neither_read_nor_change_anything(server: str, other_origin: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            results = run_attack(browser.new_page(), other_origin + "/index.html")
        finally:
            browser.close()
    # Reads are blocked by the browser (no CORS header), writes and the socket by the server.
    assert results["read_bank"].startswith("blocked"), results
    assert results["read_session"].startswith("blocked"), results
    assert results["pause"] == "opaque 0", results  # sent without CORS: the page learns nothing
    assert results["socket"] == "closed after 0 messages", results
    assert_unharmed(server)


def test_a_dns_rebinding_page_gets_421_for_everything(server: str) -> None:
    """evil.example resolves to 127.0.0.1, the attacker's page loads from http://evil.example:PORT
    (the server's port), and its same-origin requests reach the server with that Host."""
    from playwright.sync_api import sync_playwright

    port = urlsplit(server).port
    evil = f"http://evil.example:{port}"
    # Chromium's own private-network checks are turned off: the server must refuse on its own
    # (other browsers, and older ones, do not have them).
    args = [*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.example 127.0.0.1",
            "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
            "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            page = browser.new_page()
            # The attacker's own page, served before the name was rebound to 127.0.0.1.
            page.route(f"{evil}/cats.html", lambda route: route.fulfill(
                status=200, content_type="text/html", body=ATTACK % {"target": evil, "mode": "cors"}))
            results = run_attack(page, f"{evil}/cats.html")
            # A plain visit to the rebound name shows nothing of the server either.
            visit = page.goto(f"{evil}/api/bank/export")
            assert visit is not None and visit.status == 421
            assert "questions" not in page.content()
            visit = page.goto(f"{evil}/")
            assert visit is not None and visit.status == 421 and "Sessions" not in page.content()
        finally:
            browser.close()
    for name in ("read_bank", "read_session"):
        assert results[name].startswith("421 "), results  # the page reads only the refusal
        assert "questions" not in results[name] and "victim" not in results[name], results
    assert results["pause"] == "basic 421", results
    assert results["socket"] == "closed after 0 messages", results
    assert_unharmed(server)
    # The same server still answers its own name.
    assert httpx.get(f"{server}/api/bank/export").status_code == 200
