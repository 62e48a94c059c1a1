"""Issue 49, points 4, 5 and 10, in the system Chromium against a real `socratic serve`: the bank's
evidence as tables no wider than the page, the fork event in words, the MCP page that shows its
token only when asked (behind a sign-in), a campaign trace through the session trace form, the
session list grouped by campaign with its filters, hidden scenarios beside "all" and "visible",
and suggestions that fit the session; each question's gain with its interval beside the silent
control's. Screenshots go to $SOCRATIC_SCREENSHOTS when set
(49-4-*.png for point 4, 49-5-*.png for point 5, 49-10-*.png for point 10)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, CPU, ROOT, live_server

pytestmark = BROWSER_MARKS
ENV = {"SOCRATIC_BANK_SEMANTIC_SEARCH": "false"}
CAMPAIGNS = ROOT / "examples" / "campaigns" / "h200-2026-12-01-judge-fixed"
WIDTH = 1300


def shot(page: Any, name: str, selector: str | None = None) -> None:
    folder = os.environ.get("SOCRATIC_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        if selector:
            page.locator(selector).first.screenshot(path=str(Path(folder) / name))
        else:
            page.screenshot(path=str(Path(folder) / name), full_page=True)


def cli(data: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "app", *args, "--data-dir", str(data)], cwd=ROOT,
                          env={**os.environ, **ENV}, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The two example sessions (1, 2) and the evolution campaign of seed 0 (sessions 3-6)."""
    data = tmp_path_factory.mktemp("workbench-v2")
    for name in ("h200-offline-bank-questions.jsonl", "h200-offline-silent.jsonl"):
        cli(data, "trace", "import", str(ROOT / "examples" / name))
    cli(data, "campaign", "import", str(CAMPAIGNS / "h200-evolution-seed0.jsonl.xz"))
    with live_server(data, env=ENV) as base:
        yield base


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def new_page(browser: Any) -> Any:
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.set_default_timeout(30_000)
    return page


def page_width(page: Any) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_bank_evidence_is_a_table_of_uses_no_wider_than_the_page(server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = new_page(browser)
    page.goto(server + "/bank")
    group = page.locator("#evidence-table tbody.evidence-group").filter(
        has=page.locator("tr.evidence-row", has_text="For causal scenarios")).first
    expect(group.locator("tr.evidence-row")).to_be_visible()
    group.locator("details.uses > summary").click()
    uses = group.locator(".uses-table tr.use-row")
    expect(uses.first).to_be_visible()
    expect(group.locator(".knob-changes li").first).to_contain_text(" -> ")
    expect(group.locator(".uses-table")).to_contain_text("causal_skip: false -> true")
    assert "tile_d64" not in page.locator("#evidence").inner_text()  # the knob record is never shown whole
    assert page_width(page) <= WIDTH, page_width(page)  # it was 4,046 px
    shot(page, "49-5-bank-evidence.png", "#evidence")


def test_each_question_s_gain_has_its_interval_and_the_silent_control_beside_it(server: str,
                                                                                 browser: Any) -> None:
    from playwright.sync_api import expect

    page = new_page(browser)
    page.goto(server + "/bank")
    card = page.locator("#silent-control")
    expect(card).to_contain_text("silent control: pauses resumed without a message")
    expect(card).to_contain_text("7 pauses in 1 session")
    expect(card.locator(".gain")).to_have_text("1.000x")
    questions = page.locator('.evidence-card[data-kind="question"]')
    # the examples' and the campaign's questions, 19 credited uses: 1.006-1.123x
    expect(questions.locator(".interval")).to_have_text(re.compile(r"^\d\.\d{3}–\d\.\d{3}x$"))
    expect(page.locator("#evidence-table > thead")).to_contain_text("vs silent")
    control = page.locator("#evidence-table tr.control-row")
    expect(control).to_contain_text("silent control")
    rows = page.locator("#evidence-table tr.evidence-row:not(.control-row)")
    for i in range(rows.count()):  # against a control of 1.000x, each ratio is the question's own gain
        gain, versus = rows.nth(i).locator(".gain"), rows.nth(i).locator(".versus")
        if gain.count():
            expect(versus).to_have_text(gain.inner_text())
    expect(rows.locator(".interval", has_text="n=1").first).to_be_visible()  # one use: no interval
    assert page_width(page) <= WIDTH, page_width(page)
    shot(page, "49-4-bank-control.png", "#evidence")
    page.goto(server + "/sessions/2/audit")
    expect(page.locator("#audit-silent-control")).to_contain_text("7 pauses resumed without a message")
    shot(page, "49-4-audit-control.png", "#attribution")


def test_the_fork_event_reads_as_a_sentence(server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    r = httpx.post(f"{server}/api/sessions/1/candidates/21/fork",
                   json={"title": "fork of the steered leader", "start": False, "author": "Ada"}, timeout=30)
    assert r.status_code == 201, r.text
    page = new_page(browser)
    page.goto(f"{server}/sessions/{r.json()['id']}/audit/timeline")
    event = page.locator(".event.kind-forked")
    expect(event).to_contain_text("from session 1 “offline agent, bank questions answer each pause”, candidate #21 "
                                  "at 10.934x over the baseline, by Ada; it starts here as candidate #1, the leader.")
    assert not re.search(r"\d\.\d{6,}", event.inner_text())  # no 16-digit float
    event.locator("a", has_text="#21").click()
    page.wait_for_url("**/sessions/1/candidates/21")
    page.go_back()
    shot(page, "49-5-fork-event.png", "#timeline")


def test_a_campaign_trace_through_the_trace_form_and_the_list_grouped_by_campaign(server: str,
                                                                                 browser: Any) -> None:
    from playwright.sync_api import expect

    page = new_page(browser)
    page.goto(server + "/")
    page.click("#import-trace-link")
    page.set_input_files("#trace-file", str(CAMPAIGNS / "h200-board-seed1.jsonl.xz"))
    shot(page, "49-10-import-form.png")
    page.click("#import-button")
    page.wait_for_url(re.compile(r"/campaigns/2$"))
    expect(page.locator("h1")).to_contain_text("board")
    page.goto(server + "/")
    groups = page.locator("#sessions tr.campaign-row")
    expect(groups).to_have_count(2)
    first = groups.first.locator("details.campaign-group")
    expect(first).not_to_have_attribute("open", "")  # imported and finished: collapsed
    members = first.locator("tr.session-row")
    expect(members.first).to_be_hidden()
    first.locator("summary").click()
    expect(members).to_have_count(4)
    expect(members.first).to_be_visible()
    expect(members.first).to_contain_text("agent 4 (scheduling, seed 13)")  # its name in the campaign
    alone = page.locator("#sessions > tbody > tr.session-row")  # sessions of no campaign, beside the groups
    expect(alone.first).to_be_visible()
    assert alone.count() + 8 == len(httpx.get(f"{server}/api/sessions", timeout=30).json())
    shot(page, "49-10-session-list.png")
    # Filters and orders (htmx swaps the list; the address bar keeps the dashboard's URL).
    page.fill("#session-q", "pauses resumed")
    page.wait_for_url(re.compile(r"/\?q=pauses\+resumed$"))
    expect(page.locator("#sessions tr.session-row")).to_have_count(1)
    expect(page.locator("#session-count")).to_have_text(re.compile(r"1 of \d+ sessions match"))
    page.fill("#session-q", "")
    page.select_option("#session-sort", "leader")
    page.wait_for_url(re.compile(r"/\?sort=leader$"))
    expect(page.locator("#session-count")).to_contain_text("fastest leader first")
    expect(page.locator("#sessions tr.campaign-row details[open]")).to_have_count(0)
    page.select_option("#session-status", "stopped")
    expect(page.locator("#sessions tr.campaign-row details[open]")).to_have_count(2)  # a filter opens them
    shot(page, "49-10-session-filter.png")
    assert page_width(page) <= WIDTH


def test_behind_a_token_the_mcp_page_hidden_scenarios_and_fitting_suggestions(tmp_path: Path,
                                                                             browser: Any) -> None:
    from playwright.sync_api import expect

    token = "workbench-v2-token-0123456789"
    auth = {"Authorization": f"Bearer {token}"}
    steps = [{"say": "trying a slow one", "submit": {"target": f"{CPU}:correct_30ms", "title": "slower"}},
             {"say": "I'm done.", "end_turn": True}]
    body = {"title": "one slow kernel", "agent": "scripted", "agent_config": {"steps": steps},
            "candidate_kind": "python-cpu", "baseline": f"{CPU}:correct_10ms"}
    with live_server(tmp_path, "--allow-python-candidates", env={**ENV, "SOCRATIC_TOKEN": token}) as base:
        r = httpx.post(f"{base}/api/sessions", json=body, headers=auth, timeout=30)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        secret = httpx.get(f"{base}/api/sessions/{sid}/mcp", headers=auth, timeout=30).json()["token"]
        page = new_page(browser)
        page.goto(f"{base}/sessions/{sid}/mcp")
        page.wait_for_url("**/login**")
        page.fill("input[name=token]", token)
        page.click("form[action='/login'] button")
        page.wait_for_url(f"**/sessions/{sid}/mcp")
        assert secret not in page.content()  # not in the page as loaded
        expect(page.locator("#mcp-command")).to_contain_text(f"claude mcp add --transport http socratic-{sid}")
        expect(page.locator("#mcp-token")).to_have_text("hidden")
        shot(page, "49-5-mcp-page.png")
        page.click("#show-token")  # fetched with the sign-in cookie
        expect(page.locator("#mcp-token")).to_have_text(secret)
        expect(page.locator("#mcp-command")).to_contain_text(f"Bearer {secret}")
        shot(page, "49-5-mcp-token.png")

        page.goto(f"{base}/sessions/{sid}")
        expect(page.locator("#status-badge")).to_have_text("paused", timeout=120_000)
        expect(page.locator("#hidden-note")).to_contain_text("1 of 4 scenarios are hidden from the agent")
        expect(page.locator("#candidates thead")).to_contain_text("hidden (1)")
        expect(page.locator("#candidates .hidden-cell").first).to_contain_text("1/1 passed")
        suggestions = page.locator("#pause-banner .suggestion")
        expect(suggestions.first).to_be_visible()
        for text in suggestions.all_inner_texts():  # one evaluation, no leader yet
            assert "leader" not in text and "last ten" not in text and "three steps back" not in text, text
        shot(page, "49-10-hidden-and-suggestions.png")
