"""Promoting a session message into the bank, in a real browser: the system Chromium driven by
Playwright against a real `socratic serve` on loopback. A person answers a pause with their own
question, follows "add to bank" from the trace, tags it, and finds it in the bank by typing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, live_server

pytestmark = BROWSER_MARKS



@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    env = {"SOCRATIC_GPU_POLL_S": "1", "SOCRATIC_BANK_SEMANTIC_SEARCH": "false"}
    with live_server(tmp_path, "--allow-python-candidates", env=env) as base:
        yield base


def test_a_person_promotes_their_question_from_a_session_into_the_bank(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    steps = [{"say": "I think this is the limit.", "list": True}, {"say": "looking again", "list": True}]
    created = httpx.post(f"{server}/api/sessions", json={
        "title": "promote demo", "agent": "scripted", "agent_config": {"steps": steps},
        "candidate_kind": "python-cpu", "baseline": "tests.cpu_kernels:correct_10ms"}, timeout=30)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    question = "Which warps sit idle while the softmax runs, and what would they do instead?"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{server}/sessions/{sid}")
            expect(page.locator("#connection")).to_have_text("live")
            banner = page.locator('#pause-banner[data-trigger="declared_limit"]')
            expect(banner).to_be_visible()
            # The banner's suggestions come from the bank, ranked for a declared limit.
            expect(banner.locator(".suggestion").first).to_be_visible()
            # The session's auto-ask control is there, off by default.
            expect(page.locator("#auto-ask-form select[name=mode]")).to_have_value("off")

            page.fill("#composer-text", question)
            page.click("#send-button")
            message = page.locator(".event.kind-intervention").filter(has_text=question)
            expect(message).to_have_count(1)

            # From the trace to the bank: the form is prefilled with the message and its trigger.
            message.locator("a.promote-link").click()
            page.wait_for_url("**/bank/promote?**")
            expect(page.locator("#promoted-message")).to_have_text(question)
            expect(page.locator("#promote-form textarea[name=text]")).to_have_value(question)
            expect(page.locator('#promote-form input[name=triggers][value="declared_limit"]')).to_be_checked()

            # Submitting without a layer is refused, with the field named and nothing written.
            page.click("#promote-button")
            expect(page.locator('.field-error[data-field="layers"]')).to_contain_text("name at least one of")
            page.check('#promote-form input[name=layers][value="pipeline"]')
            page.check('#promote-form input[name=layers][value="scheduling"]')
            page.check('#promote-form input[name=triggers][value="plateau"]')
            page.click("#promote-button")

            page.wait_for_url("**/bank/questions/*")
            expect(page.locator("#bank-notice")).to_contain_text("to the bank")
            expect(page.locator("h1.bank-question-title")).to_have_text(question)
            expect(page.locator(".facts")).to_contain_text(f"promoted by person from session {sid}, message")

            # Found in the bank as the person types, with its layers; and no longer offered for promotion.
            page.click("header nav >> text=Question bank")
            page.fill("#bank-q", "softmax wa")
            expect(page.locator("#bank-count")).to_contain_text("for “softmax wa”")
            row = page.locator(".bank-row").filter(has_text=question)
            expect(row).to_have_count(1)
            expect(row).to_contain_text("pipeline")
            expect(page.locator("#messages .message-row").filter(has_text=question)).to_have_count(0)
        finally:
            browser.close()

    banked = httpx.get(f"{server}/api/bank/questions", params={"q": "idle while the softmax"}, timeout=30).json()
    assert banked[0]["text"] == question
    assert banked[0]["triggers"] == ["declared_limit", "plateau"]
    assert banked[0]["layers"] == ["pipeline", "scheduling"]
    # The message was delivered when the session resumed; its use now belongs to the question.
    assert banked[0]["evidence"]["uses"] == 1
