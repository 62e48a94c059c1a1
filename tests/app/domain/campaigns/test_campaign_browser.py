"""The campaign page in a real browser: the system Chromium, driven by Playwright, against a
real `socratic serve` on loopback. A campaign is first run in this process (the synthetic speed
table stands in for the GPU, as in test_campaign_api_and_trace.py); the server then shows it
from the same database: leaderboard, board, tree, pauses; and the form creates a new one."""

from __future__ import annotations

import os
from pathlib import Path

from tests.app.domain.campaigns.test_campaign_api_and_trace import run_campaign
from tests.family_model import SyntheticEvaluator
from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, live_server, running_app

pytestmark = BROWSER_MARKS


def test_the_campaign_page_shows_the_leaderboard_board_and_tree_and_the_form_creates_one(
        tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator()) as client:
        view = run_campaign(client, {"title": "three agents", "agents": 3, "budget_evaluations": 12,
                                     "plateau_window": 4,
                                     "thresholds": {"plateau_window": 3, "suspicious_jump": 50}})
    expect.set_options(timeout=60_000)
    with live_server(tmp_path, env={"SOCRATIC_GPU_POLL_S": "1"}) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1400})
            page.goto(base + "/")
            page.click("#new-campaign-link")
            expect(page.locator("#campaigns .campaign-row")).to_have_count(1)
            page.click("text=three agents")
            page.wait_for_url(f"**/campaigns/{view['id']}")
            expect(page.locator("#leaderboard .leader-row")).to_have_count(3)
            expect(page.locator("#leaderboard .campaign-leader")).to_have_count(1)
            expect(page.locator("#board .board-entry")).to_have_count(len(view["board"]))
            expect(page.locator("#campaign-tree .node")).to_have_count(len(view["tree"]["nodes"]))
            expect(page.locator("#campaign-tree .node.leader")).to_have_count(1)
            expect(page.locator("#campaign-summary")).to_contain_text("12 / 12 evaluations")
            expect(page.locator("#pauses li").first).to_be_visible()
            shot = Path(os.environ.get("SOCRATIC_SCREENSHOT_DIR", tmp_path)) / "campaign-page.png"
            page.screenshot(path=str(shot), full_page=True)

            # The form on /campaigns creates and starts a campaign of offline agents.
            page.goto(base + "/campaigns")
            page.fill("#campaign-form input[name=title]", "from the form")
            page.fill("#campaign-form input[name=agents]", "2")
            page.fill("#campaign-form input[name=budget_evaluations]", "6")
            page.click("#create-campaign")
            page.wait_for_url("**/campaigns/2")
            expect(page.locator("#leaderboard .leader-row")).to_have_count(2)
            expect(page.locator("#leaderboard")).to_contain_text("running")  # waiting for a GPU here
            page.click("#campaign-stop")
            expect(page.locator("#leaderboard .member-state.state-stopped")).to_have_count(2)  # neutral, not red
        finally:
            browser.close()
