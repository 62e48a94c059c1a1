"""A first run that goes somewhere: an empty dashboard offers the shipped example sessions in one
click and, where python-cpu candidates are allowed, the CPU demo; elsewhere it says how to get
the demo. Driven in the system Chromium against a real `socratic serve`; screenshots go to
$SOCRATIC_SCREENSHOTS when set."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, live_server

pytestmark = BROWSER_MARKS
ENV = {"SOCRATIC_BANK_SEMANTIC_SEARCH": "false", "SOCRATIC_GPU_POLL_S": "1"}


def shot(page: object, name: str) -> None:
    folder = os.environ.get("SOCRATIC_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=True)  # type: ignore[attr-defined]


def test_an_empty_dashboard_imports_the_examples_and_runs_the_cpu_demo(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)
    with live_server(tmp_path / "demo", "--allow-python-candidates", env=ENV) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(base + "/")
            card = page.locator("#first-run")
            expect(card).to_contain_text("Import the example sessions")
            expect(card).to_contain_text("h200-offline-bank-questions.jsonl")
            shot(page, "first-run.png")
            page.click("#import-examples")
            page.wait_for_url(re.compile(r"/\?examples=2$"))
            rows = page.locator("#sessions .session-row")
            expect(rows).to_have_count(2)
            expect(page.locator("#first-run")).to_have_count(0)  # sessions now: the card steps aside
            page.locator("#sessions a", has_text="bank questions").first.click()
            expect(page.locator("body")).to_contain_text("10.934x")
        finally:
            browser.close()
    with live_server(tmp_path / "cpu", "--allow-python-candidates", env=ENV) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(base + "/")
            page.click("#run-cpu-demo")
            page.wait_for_url("**/sessions/1")
            expect(page.locator("h1")).to_contain_text("CPU demo")
        finally:
            browser.close()


def test_without_python_candidates_the_card_says_how_to_get_the_demo(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with live_server(tmp_path, env=ENV) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(base + "/")
            expect(page.locator("#run-cpu-demo")).to_have_count(0)
            expect(page.locator("#cpu-demo-how")).to_contain_text("--allow-python-candidates")
        finally:
            browser.close()
