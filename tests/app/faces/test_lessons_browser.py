"""Lessons as a person uses them, in the system Chromium against a real `socratic serve`: the
example H200 trace imported (session 1) and distilled before the server starts. On /lessons the
list narrows as one types, a lesson's page links its evidence into the session's audit, and
Retire sticks; on a paused session's page the banner shows "Lessons that fit", and "Send as
message" sends one (it appears among the session's messages)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.domain.audit.trace_io import import_trace
from app.domain.lessons import distill_session
from app.settings import Settings
from app.store.database import open_database
from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, ROOT, live_server

pytestmark = BROWSER_MARKS
TRACE = ROOT / "examples" / "h200-offline-bank-questions.jsonl"
ENV = {"SOCRATIC_BANK_SEMANTIC_SEARCH": "false"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not TRACE.exists():
        pytest.skip("examples/ lacks the example trace")
    data: Path = tmp_path_factory.mktemp("lessons-browser")
    database = open_database(Settings(data_dir=data))
    try:
        with database.session() as db:
            session = import_trace(db, TRACE.read_text(encoding="utf-8"), TRACE.name)
            db.commit()
            distill_session(db, session.id or 0)
            db.commit()
    finally:
        database.dispose()
    with live_server(data, "--allow-python-candidates", env=ENV) as base:
        yield base


@pytest.fixture
def page(server: str) -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=20_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 900})
            pg.set_default_timeout(20_000)
            yield pg
        finally:
            browser.close()


def test_search_a_lesson_follow_its_evidence_and_retire_it(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(server + "/")
    page.click("header nav a[href='/lessons']")
    rows = page.locator("#lesson-results .lesson-row")
    expect(rows.first).to_be_visible()
    before = rows.count()
    assert before > 2
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/lessons/results" in r.url else None)
    page.fill("#lessons-q", "exp2")  # htmx swaps the table as one types
    expect(rows).to_have_count(2)
    expect(page.locator("#lessons-count")).to_contain_text("2 lessons")
    # Leaving the field asks nothing more: a second swap under the pointer would eat the click below.
    page.locator("#lessons-q").press("Tab")
    page.locator("#lesson-results .lesson-action").first.click()
    assert [u.split("?")[1].split("&")[0] for u in asked] == ["q=exp2"]
    expect(page.locator("h1.lesson-title")).to_contain_text("softmax_exp")
    evidence = page.locator("#lesson-evidence a.evidence-session").first
    expect(evidence).to_have_attribute("href", "/sessions/1/audit")
    page.click("#retire-button")
    expect(page.locator("#lesson-notice")).to_contain_text("Retired")
    expect(page.locator(".lesson-status")).to_have_text("retired")
    expect(page.locator("#activate-button")).to_be_visible()
    page.goto(server + "/lessons")  # out of the default list (proposed and active)
    expect(rows).to_have_count(before - 1)


def test_a_paused_session_offers_lessons_that_fit_and_sends_one(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    body = {"title": "needs a lesson", "agent": "scripted", "candidate_kind": "python-cpu",
            "baseline": "tests.cpu_kernels:correct_10ms",
            "agent_config": {"steps": [{"say": "done", "declare_done": "no idea left"}]}}
    r = httpx.post(f"{server}/api/sessions", json=body, timeout=30)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    deadline = time.monotonic() + 60
    while httpx.get(f"{server}/api/sessions/{sid}", timeout=10).json()["status"] != "paused":
        assert time.monotonic() < deadline, "the session did not pause"
        time.sleep(0.2)
    page.goto(f"{server}/sessions/{sid}")
    panel = page.locator("#pause-banner #lessons-fit")
    expect(panel).to_contain_text("Lessons that fit")
    first = panel.locator(".lesson-fit").first
    lesson_id = first.get_attribute("data-id")
    expect(first.locator("a.lesson-evidence-link")).to_have_attribute("href", f"/lessons/{lesson_id}")
    first.locator("button.send-lesson").click()
    expect(page.locator("#interventions")).to_contain_text(f"Lesson #{lesson_id}: ")
    messages = httpx.get(f"{server}/api/sessions/{sid}/interventions", timeout=10).json()
    assert [m["text"].split(":")[0] for m in messages] == [f"Lesson #{lesson_id}"]
    assert messages[0]["kind"] == "information"
