"""The fork form in the system Chromium (issue 49, point 8): the new-session form's fields and
widgets (a select of the family's layers for the focus, the same plateau default), the source's
settings filled in, and the knob setting the offline agent will continue from. The source session
runs in this process on the synthetic GPU of tests/family_model.py, the page comes from a real
`socratic serve` on the same database. Screenshot: $SOCRATIC_SCREENSHOTS/49-8.png when set."""

from __future__ import annotations

import os
from pathlib import Path

from app.engine.agents.offline import start_spec
from kernels.attention.family import LAYERS
from tests.app.engine.test_fork_continues import BETTER, family_source_session
from tests.family_model import SyntheticEvaluator
from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, live_server, running_app

pytestmark = BROWSER_MARKS


def test_the_fork_form_is_the_new_session_form_and_continues_from_the_candidate(tmp_path: Path) -> None:
    import httpx
    from playwright.sync_api import expect, sync_playwright

    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator()) as client:
        source = family_source_session(client)
    sid, spec = source["id"], start_spec(BETTER.to_dict())
    expect.set_options(timeout=30_000)
    with live_server(tmp_path, env={"SOCRATIC_GPU_POLL_S": "1"}) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(base + "/")
            plateau = page.locator("#new-session input[name=plateau_window]").get_attribute("placeholder")
            page.goto(f"{base}/sessions/{sid}/audit/candidates/2")
            page.click("#fork-link")
            page.wait_for_url(f"**/sessions/{sid}/candidates/2/fork")
            form = page.locator("#fork-form")
            expect(form.locator("select[name=agent]")).to_have_value("scripted")
            page.select_option("#fork-form select[name=agent]", "offline")
            focus = form.locator("select[name=focus]")
            expect(focus).to_be_visible()
            assert focus.locator("option").all_inner_texts() == list(LAYERS)
            expect(form.locator("input[name=plateau_window]")).to_have_attribute("placeholder", plateau or "")
            expect(form.locator("input[name=plateau_window]")).to_have_value("")
            expect(form.locator("input[name=suite_filter]")).to_be_disabled()  # a fork keeps the scenarios
            expect(page.locator("#fork-continues")).to_contain_text(spec)
            page.select_option("#fork-form select[name=focus]", "math")
            page.fill("#fork-form input[name=title]", "continue from #2")
            page.uncheck("#fork-form input[name=start]")
            folder = os.environ.get("SOCRATIC_SCREENSHOTS")
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(folder) / "49-8.png"), full_page=True)
            page.click("#fork-submit")
            page.wait_for_url(f"**/sessions/{sid + 1}")
            made = httpx.get(f"{base}/api/sessions/{sid + 1}").json()
            assert made["agent"] == "offline" and made["agent_config"] == {"focus": "math", "start": spec}
            assert made["leader_number"] == 1 and made["status"] == "created"
        finally:
            browser.close()
