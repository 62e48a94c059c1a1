"""The diagnosis on a candidate page and in the pause banner, in the system Chromium against a
real server process (scripts/agent_v2_proof.py's stand-in server: the real app with the
synthetic H100 of tests/family_model.py as its evaluator)."""

from __future__ import annotations

from pathlib import Path

import httpx

from scripts.agent_v2_proof import Server
from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS
from tests.waiting import wait_until

pytestmark = BROWSER_MARKS


def test_the_candidate_page_and_the_pause_banner_show_what_bounds_the_kernel(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    server = Server(tmp_path / "data", standin=True)
    try:
        http = server.http
        r = http.post("/api/sessions", json={
            "title": "profiled in a browser", "agent": "offline", "agent_config": {"seed": 0},
            "suite_filter": "category=prefill,head_dim=128", "thresholds": {"plateau_window": 2,
                                                                             "suspicious_jump": 50}})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        state = wait_until(lambda: (lambda s: s if s["status"] == "paused" and s["evaluations"] >= 3 else None)(
            http.get(f"/api/sessions/{sid}").json()), 90, "the session's first pause")
        leader = http.get(f"/api/sessions/{sid}/candidates/{state['leader_number']}/profile").json()
        expect.set_options(timeout=30_000)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page()
                page.goto(f"{server.base}/sessions/{sid}/candidates/1")
                expect(page.locator("#profile h2")).to_contain_text("Profile")
                expect(page.locator("#diagnosis")).to_contain_text("no HGMMA on sm_90a")
                expect(page.locator('li[data-finding="no_wgmma_on_hopper"]')).to_contain_text("math layer, mma=wgmma")
                page.goto(f"{server.base}/sessions/{sid}")
                expect(page.locator("#pause-diagnosis")).to_contain_text("What bounds the leader")
                expect(page.locator("#pause-diagnosis")).to_contain_text(leader["diagnosis"].split(";")[0])
            finally:
                browser.close()
        httpx.post(f"{server.base}/api/sessions/{sid}/stop", json={"author": "test"}, timeout=30)
    finally:
        server.close()
