"""The workbench as a kernel engineer reads it, in the system Chromium at 1400 px against a
real `socratic serve` holding both example traces (imported with `socratic trace import`):
compare the steered and the control session, fork a new session from a candidate of an
imported one, the bank's evidence from imported sessions, the lineage leader in view, and
diffs as tall as their changed lines. Screenshots go to $SOCRATIC_SCREENSHOTS when set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, ROOT, live_server

pytestmark = BROWSER_MARKS
EXAMPLES = sorted((ROOT / "examples").glob("h200-*.jsonl"))
ENV = {"SOCRATIC_BANK_SEMANTIC_SEARCH": "false"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if len(EXAMPLES) < 2:
        pytest.skip("examples/ lacks the two example traces")
    data = tmp_path_factory.mktemp("workbench")
    for path in EXAMPLES:  # bank questions first (session 1), then the silent control (session 2)
        done = subprocess.run([sys.executable, "-m", "app", "trace", "import", str(path), "--data-dir",
                               str(data)], cwd=ROOT, env={**os.environ, **ENV}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
    with live_server(data, env=ENV) as base:
        yield base


@pytest.fixture
def page(server: str) -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 900})
            pg.set_default_timeout(30_000)
            yield pg
        finally:
            browser.close()


def shot(page: Any, name: str) -> None:
    folder = os.environ.get("SOCRATIC_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def leader_of(server: str, session_id: int) -> int:
    import httpx

    return int(httpx.get(f"{server}/api/sessions/{session_id}").json()["leader_number"])


def test_compare_overlays_the_steered_and_the_control_session(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(server + "/")
    page.click("#compare-link")
    page.check("#compare-pick input[value='1']")
    page.check("#compare-pick input[value='2']")
    page.click("#compare-go")
    page.wait_for_url(re.compile(r"/compare\?s=\d&s=\d$"))
    # Two leader curves on one chart, the seven bank questions marked on the steered one only.
    expect(page.locator("#compare-curves .compare-line")).to_have_count(2)
    expect(page.locator("#compare-curves .compare-mark")).to_have_count(7)
    expect(page.locator("#compare-legend")).to_contain_text("7 messages")
    expect(page.locator("#compare-legend")).to_contain_text("0 messages")
    # The table of leaders: over the baseline and each peer the reports timed, per category.
    rows = page.locator("#compare-leaders .compare-row")
    expect(rows).to_have_count(2)
    header = page.locator("#compare-leaders thead")
    expect(header).to_contain_text("× cuDNN")
    expect(header).to_contain_text("decode × baseline")
    expect(rows.nth(0)).to_contain_text("10.934x")  # the steered leader
    expect(rows.nth(0).locator("td").nth(1)).to_have_text("#21")
    expect(rows.nth(1)).to_contain_text("8.533x")  # the control, still led by its first port
    # Every geomean says what it is over: both ran the same 10 scenarios on one H200.
    expect(page.locator("#compare-shared")).to_contain_text("the same 10 scenarios, measured on NVIDIA H200")
    expect(rows.nth(0).locator(".arm-scenarios")).to_have_text("10/10")
    # Leader against leader: one cell per scenario, the steered leader faster on most.
    cells = page.locator("#compare-heat .heat-box")
    assert cells.count() == 10
    ratios = [float(t.rstrip("x")) for t in cells.locator("b").all_inner_texts()]
    assert sum(r > 1 for r in ratios) > len(ratios) / 2
    shot(page, "compare.png")


def test_fork_from_a_candidate_of_an_imported_session(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    leader = leader_of(server, 1)
    page.goto(f"{server}/sessions/1/audit/candidates/{leader}")
    page.click("#fork-link")
    page.wait_for_url(f"**/sessions/1/candidates/{leader}/fork")
    # Settings copied from the source and editable.
    expect(page.locator("#fork-form select[name=agent]")).to_have_value("offline")
    expect(page.locator("#fork-form input[name=seed]")).to_have_value("0")
    page.fill("#fork-form input[name=title]", "fork: try the decode split again")
    page.fill("#fork-form input[name=seed]", "7")
    page.uncheck("#fork-form input[name=start]")
    shot(page, "fork.png")
    page.click("#fork-submit")
    page.wait_for_url("**/sessions/3")
    expect(page.locator("h1")).to_contain_text("fork: try the decode split again")
    # The candidate is the new session's starting leader.
    state = page.request.get(f"{server}/api/sessions/3").json()
    assert state["leader_number"] == 1 and state["agent_config"]["seed"] == 7
    source = page.request.get(f"{server}/api/sessions/1/candidates/{leader}").json()
    assert abs(state["leader_speedup"] - source["speedup"]) < 1e-12
    # Lineage across sessions in both audits.
    page.goto(f"{server}/sessions/3/audit")
    expect(page.locator("#forked-from")).to_contain_text(f"session 1 candidate #{leader}")
    page.goto(f"{server}/sessions/1/audit")
    expect(page.locator("#forks")).to_contain_text("session 3")
    shot(page, "fork-source-audit.png")


def test_the_bank_counts_the_imported_sessions(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(server + "/bank")
    table = page.locator("#evidence-table tr.evidence-row:not(.unbanked):not(.control-row)")
    expect(table).to_have_count(7)  # the seven questions the bank asked in the steered session
    # above them, the silent session's seven pauses resumed without a word: the control
    expect(page.locator("#evidence-table tr.control-row td:nth-child(4)")).to_have_text("7")
    credited = [int(t) for t in table.locator("td:nth-child(5)").all_inner_texts()]
    assert credited == [1] * 7
    question_card = page.locator(".evidence-card[data-kind=question]")
    expect(question_card).to_contain_text("7 sent")
    # Each new leader credited once: the seven gains multiply to the steered session's own gain
    # after its first question (8.533x -> 10.934x), so their geomean is 1.281^(1/7).
    expect(question_card).to_contain_text("1.037x")


def test_the_lineage_opens_with_the_leader_in_view(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{server}/sessions/1/audit/lineage")
    leader = page.locator("svg.lineage .node.is-leader rect")
    expect(leader).to_have_count(1)
    page.wait_for_function("document.getElementById('lineage-scroll').scrollLeft > 0 || "
                           "document.getElementById('lineage-scroll').scrollWidth <= "
                           "document.getElementById('lineage-scroll').clientWidth")
    box = page.locator("#lineage-scroll").bounding_box()
    node = leader.bounding_box()
    assert box and node
    assert box["x"] <= node["x"] and node["x"] + node["width"] <= box["x"] + box["width"], (box, node)
    assert node["x"] >= 0 and node["x"] + node["width"] <= 1400
    # Where each question arrived: seven messages, each on the first candidate judged after it.
    marks = page.locator("svg.lineage .q-mark")
    assert marks.count() >= 1
    titles = " ".join(marks.locator("title").all_text_contents())
    assert titles.count("bank question:") == 7


def test_a_diff_is_as_tall_as_its_changed_lines(server: str, page: Any) -> None:
    leader = leader_of(server, 1)
    heights = []
    for a, b in (("baseline", str(leader)), (str(leader - 1), str(leader))):
        page.goto(f"{server}/sessions/1/audit/diff?a={a}&b={b}")
        rows = page.locator("#diff-lines > span.r")
        n = rows.count()
        changed = page.locator("#diff-lines > span.r-add, #diff-lines > span.r-del").count()
        folds = page.locator("#diff-lines > span.r-fold").count()
        height = page.locator("#diff-lines").bounding_box()["height"]
        # One 18 px line per row, no blank line between rows; unchanged runs fold to one row,
        # so the rows are the changed lines, at most 6 lines of context per change, and folds.
        assert abs(height - (n * 18 + 8)) <= 4, (a, b, height, n)
        classes = rows.evaluate_all("els => els.map(e => e.className)")
        runs = "".join("c" if c == "r r-ctx" else "|" for c in classes).split("|")
        assert max(len(r) for r in runs) <= 7, "an unchanged run longer than 2 x 3 lines of context is folded"
        assert folds == 0 or "⋯" in page.locator("#diff-lines > span.r-fold").first.inner_text()
        heights.append((height, changed))
        numbers = page.locator("#diff-lines > span.r-add .ln, #diff-lines > span.r-ctx .ln").all_inner_texts()
        assert any(t.strip().isdigit() for t in numbers)  # line numbers shown
    (big, big_changed), (small, small_changed) = heights
    assert small_changed < big_changed and small < big
    page.goto(f"{server}/sessions/1/audit/diff?a=baseline&b={leader}&view=split")
    assert page.locator("table#diff-lines tr").count() > 0


def test_the_new_session_form_shows_only_the_chosen_agents_fields(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(server + "/")
    page.select_option("#new-session select[name=agent]", "offline")
    expect(page.locator("#new-session input[name=seed]")).to_be_visible()
    expect(page.locator("#new-session input[name=model]")).to_be_hidden()
    expect(page.locator("#new-session select[name=script]")).to_be_hidden()
    expect(page.locator("#agent-description")).to_contain_text("no model, no key")  # the whole description
    page.select_option("#new-session select[name=agent]", "scripted")
    expect(page.locator("#new-session select[name=script]")).to_be_visible()
    expect(page.locator("#new-session input[name=seed]")).to_be_hidden()
