"""The whole loop in a real browser: the system Chromium, driven by Playwright, against a real
`socratic serve` on loopback. Start a session with the scripted agent, see candidates arrive,
see a plateau pause with its evidence, send a question, see it delivered and the session resume."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, live_server

pytestmark = BROWSER_MARKS



@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(tmp_path, "--allow-python-candidates", env={"SOCRATIC_GPU_POLL_S": "1"}) as base:
        yield base


@pytest.mark.serial  # the CPU demo's 2 ms kernel must beat the 5 ms leader: short sleeps need an idle core
def test_a_person_answers_a_plateau_with_a_question_and_the_session_resumes(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=90_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(90_000)
            page.goto(server + "/")
            expect(page.locator("h1")).to_have_text("Sessions")
            page.fill("#new-session input[name=title]", "browser demo")
            page.select_option("#new-session select[name=agent]", "scripted")
            page.select_option("#new-session select[name=script]", "cpu-demo")
            page.click("#new-session button[type=submit]")
            page.wait_for_url("**/sessions/1")
            expect(page.locator("#connection")).to_have_text("live")

            # Candidates arrive over the websocket, with their verdicts.
            expect(page.locator("#candidates .candidate-row")).to_have_count(3)
            expect(page.locator("#candidates .candidate-row.verdict-leader")).to_have_count(1)

            # The plateau pauses the session; the banner shows the window and suggested questions.
            banner = page.locator('#pause-banner[data-trigger="plateau"]')
            expect(banner).to_be_visible()
            expect(banner).to_contain_text("no new leader in the last 3 evaluations")
            expect(page.locator("#status-badge")).to_have_text("paused")
            expect(banner.locator(".suggestion").first).to_be_visible()

            # A suggestion fills the composer; the person writes their own question instead.
            banner.locator(".suggestion").first.click()
            expect(page.locator("#composer-text")).not_to_have_value("")
            question = "Which layer have you not touched yet: could the waits overlap?"
            page.fill("#composer-text", question)
            page.click("#send-button")
            expect(page.locator("#composer-status")).to_contain_text("Question sent (steer).")

            # Delivered to the agent, the session resumed, and the agent acknowledged it.
            expect(page.locator(".event.kind-delivered")).to_contain_text(question)
            expect(page.locator(".event.kind-status").filter(has_text="resumed")).to_have_count(1)
            expect(page.locator(".event.kind-agent_step").filter(has_text=question)).to_have_count(1)
            expect(page.locator("#interventions .intervention-status")).to_have_text("delivered")
            # The new approach wins: candidate #6 leads after its re-time against #2.
            expect(page.locator('#candidates .candidate-row[data-number="6"]')).to_have_class(
                "candidate-row verdict-leader")

            # A reload shows the same trace, each event once.
            page.reload()
            expect(page.locator("#connection")).to_have_text("live")
            seqs = page.locator("#trace .event").evaluate_all("els => els.map(e => Number(e.dataset.seq))")
            assert seqs == list(range(1, len(seqs) + 1))
            page.goto(server + "/sessions/1/candidates/6")
            expect(page.locator("pre.diff")).to_contain_text("+tests.cpu_kernels:correct_2ms")
        finally:
            browser.close()


def test_stop_asks_first_and_a_dismissed_stop_sends_nothing(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=90_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(server + "/")
            page.fill("#new-session input[name=title]", "stop me")
            page.select_option("#new-session select[name=agent]", "scripted")
            page.select_option("#new-session select[name=script]", "cpu-demo")
            page.click("#new-session button[type=submit]")
            page.wait_for_url("**/sessions/1")
            expect(page.locator("#status-badge")).to_have_text("paused")  # the demo's plateau
            asked: list[str] = []

            def answer(dialog, accept: bool) -> None:  # type: ignore[no-untyped-def]
                asked.append(dialog.message)
                dialog.accept() if accept else dialog.dismiss()

            page.once("dialog", lambda d: answer(d, False))
            page.click("#stop-button")
            expect(page.locator("#status-badge")).to_have_text("paused")
            assert asked and "cannot be resumed" in asked[0]
            page.once("dialog", lambda d: answer(d, True))
            page.click("#stop-button")
            expect(page.locator("#status-badge")).to_have_text("stopped")
            assert len(asked) == 2
        finally:
            browser.close()
