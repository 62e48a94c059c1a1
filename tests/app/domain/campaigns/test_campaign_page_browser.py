"""The campaign page as a kernel engineer reads it (issue 49, point 9), in the system Chromium
against a real `socratic serve` holding the shipped H200 board campaign (imported with
`socratic campaign import`): one name per agent in the leaderboard and the tree, counts that add
up with a legend saying why 12 / 12 while the agents judged 15, effects that say what they are
measured against, neutral "finished" pills, and a tree that zooms and whose nodes open the
kernel. Screenshot: $SOCRATIC_SCREENSHOTS/49-9.png when set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, ROOT, live_server

pytestmark = BROWSER_MARKS
TRACE = ROOT / "examples/campaigns/h200-2026-12-01-board-v2/h200-board-seed0.jsonl.xz"


def test_the_campaign_page_names_counts_and_compares_plainly_and_its_tree_zooms(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    if not TRACE.exists():
        pytest.skip("the example campaign trace is not in examples/")
    done = subprocess.run([sys.executable, "-m", "app", "campaign", "import", str(TRACE), "--data-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expect.set_options(timeout=30_000)
    with live_server(tmp_path) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(base + "/campaigns/1")
            # One name per agent: the leaderboard's names head the tree's bands.
            names = page.locator("#leaderboard .agent-name").all_inner_texts()
            assert sorted(names) == [f"agent {i} ({layer}, seed {i - 1})" for i, layer in
                                     enumerate(("tiling", "memory", "math", "scheduling"), start=1)]
            bands = page.locator("#campaign-tree .band")
            assert sorted(bands.evaluate_all("gs => gs.map(g => g.dataset.name)")) == sorted(names)
            heads = bands.locator(".tree-head").all_text_contents()  # drawn in two lines: "agent 1", "(tiling, seed 0)"
            assert sorted(h.replace("(", " (") for h in heads) == sorted(names) and "session" not in " ".join(heads)
            # The counts add up, and the legend says why the agents' 15 are not the budget's 12.
            expect(page.locator("#campaign-summary")).to_contain_text("12 / 12 evaluations counted against the budget")
            expect(page.locator("#campaign-summary")).to_contain_text("15 judged by the agents")
            expect(page.locator("#leaderboard tfoot")).to_contain_text("15 (12 counted)")
            expect(page.locator("#counts-legend")).to_contain_text("3 repeats of the agents' common first kernel")
            # Effects say what they compare.
            board = page.locator("#board")
            expect(board.locator(".board-entry", has_text="mma=wgmma").first).to_contain_text("vs")
            expect(board.locator(".board-entry", has_text="smem_layout=swizzle")).to_contain_text("vs its parent #1")
            expect(board.locator(".board-entry", has_text="first port").first).to_contain_text("over the baseline")
            # Finished agents: a neutral pill, none red.
            expect(page.locator("#leaderboard .member-state.state-finished")).to_have_count(4)
            expect(page.locator("#leaderboard .member-state.tone-bad")).to_have_count(0)
            # The tree: at its own size (readable), zoomable, each node opening its kernel.
            tree = page.locator("#campaign-tree")
            nodes = page.request.get(base + "/api/campaigns/1").json()["tree"]["nodes"]
            assert len(nodes) >= 15  # the 15 judged kernels, and those cancelled when the budget ran out
            expect(tree.locator(".node")).to_have_count(len(nodes))
            natural = float(tree.get_attribute("data-width") or 0)
            assert natural >= 900 and float(tree.get_attribute("width") or 0) >= 0.75 * natural  # readable
            level = page.locator("[data-zoom-for=campaign-tree-box] .zoom-level")
            page.click("[data-zoom-for=campaign-tree-box] [data-zoom='1']")
            expect(level).to_have_text("100%")
            assert float(tree.get_attribute("width") or 0) == pytest.approx(natural, abs=1)
            page.click("[data-zoom-for=campaign-tree-box] [data-zoom=out]")
            expect(level).to_have_text("80%")
            assert float(tree.get_attribute("width") or 0) == pytest.approx(natural / 1.25, abs=1)
            page.click("[data-zoom-for=campaign-tree-box] [data-zoom=fit]")
            box = page.locator("#campaign-tree-box").bounding_box()
            drawn = tree.bounding_box()
            assert box and drawn and drawn["width"] <= box["width"]  # the whole tree in the page's width
            folder = os.environ.get("SOCRATIC_SCREENSHOTS")
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(folder) / "49-9.png"), full_page=True)
            leader = tree.locator(".node.leader")
            expect(leader).to_have_count(1)
            href = leader.get_attribute("href") or ""
            leader.locator("circle").click()
            page.wait_for_url(f"**{href}")
            expect(page.locator("h1")).to_contain_text("#4")
        finally:
            browser.close()
