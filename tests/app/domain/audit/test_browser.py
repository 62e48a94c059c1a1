"""A newcomer's path in a real browser: import a trace with `socratic trace import` (the
example H200 trace when examples/ has one, else the session recorded on the CPU here), start
`socratic serve` on loopback, and open the lineage tree, a diff and a heatmap in the system
Chromium through Playwright."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import PROJECT_ROOT
from tests.app.domain.audit.conftest import RecordedSession
from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, live_server

ROOT = PROJECT_ROOT
EXAMPLES = ROOT / "examples"

pytestmark = BROWSER_MARKS



def example_trace() -> Path | None:
    found = sorted(EXAMPLES.glob("*.jsonl")) if EXAMPLES.is_dir() else []
    return found[0] if found else None


@pytest.fixture
def trace_file(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    example = example_trace()
    if example is not None:
        return example
    recorded: RecordedSession = request.getfixturevalue("recorded")  # record one only when needed
    path = tmp_path / "recorded.jsonl"
    path.write_bytes(recorded.trace.encode())
    return path


@pytest.fixture
def server(tmp_path: Path, trace_file: Path) -> Iterator[str]:
    data = tmp_path / "data"
    env = {**os.environ, "SOCRATIC_BANK_SEMANTIC_SEARCH": "false"}
    done = subprocess.run([sys.executable, "-m", "app", "trace", "import", str(trace_file), "--data-dir",
                           str(data)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "as session 1 (read-only)" in done.stdout
    with live_server(data, env={"SOCRATIC_BANK_SEMANTIC_SEARCH": "false"}) as base:
        yield base


def test_an_imported_trace_shows_its_lineage_a_diff_and_a_heatmap(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(30_000)
            page.goto(server + "/")
            expect(page.locator("#sessions .imported-badge")).to_have_count(1)
            page.goto(server + "/sessions/1/audit")
            expect(page.locator("#imported-badge")).to_be_visible()
            expect(page.locator("#speedup svg .dot").first).to_be_visible()

            # The lineage tree: the baseline at the root, the leader marked, its path highlighted.
            page.click("#tab-lineage")
            page.wait_for_url("**/sessions/1/audit/lineage")
            expect(page.locator("svg.lineage .node[data-node=baseline]")).to_be_visible()
            leader = page.locator("svg.lineage .node.is-leader")
            expect(leader).to_have_count(1)
            assert page.locator("svg.lineage .edge-leader").count() >= 1
            leader_number = leader.get_attribute("data-node")
            assert leader_number and leader_number.isdigit()

            # A diff between two kernels picked in the form: the baseline and the leader.
            page.select_option("#diff-a", "baseline")
            page.select_option("#diff-b", leader_number)
            page.click("#diff-button")
            page.wait_for_url(f"**/audit/diff?a=baseline&b={leader_number}")
            expect(page.locator("#diff h2")).to_contain_text(f"baseline → #{leader_number}")
            expect(page.locator("#diff-lines .add").first).to_be_visible()

            # The leader's heatmap, reached by clicking its node.
            page.goto(server + "/sessions/1/audit/lineage")
            page.locator("svg.lineage .node.is-leader").click()
            page.wait_for_url(f"**/audit/candidates/{leader_number}")
            cells = page.locator("svg.heatmap .heat-cell")
            expect(cells.first).to_be_visible()
            assert cells.count() >= 4
            expect(page.locator("#heatmap")).to_contain_text("scenarios passed")
            page.click("#diff-parent")
            expect(page.locator("#diff")).to_be_visible()

            # The timeline, filtered to the harness's evaluations by ticking one box.
            page.goto(server + "/sessions/1/audit/timeline")
            page.check("#timeline-filters input[value=evaluation]")
            page.wait_for_url("**/audit/timeline?kind=evaluation*")
            expect(page.locator("#timeline-count")).to_contain_text("match")
            kinds = page.locator("#timeline .audit-event").evaluate_all("els => els.map(e => e.dataset.kinds)")
            assert kinds and set(kinds) == {"evaluation"}
        finally:
            browser.close()
