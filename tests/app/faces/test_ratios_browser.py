"""Issue 49, points 6 and 7, in the system Chromium against a real `socratic serve`: a candidate
whose re-time left three scenarios untimed (the leader returned cudaErrorInvalidValue there)
says how many were timed and against what, on its chip, its facts and its column; every ratio
column says which way it goes; peers are named cuDNN, FA2, FA3; TFLOP/s and GB/s carry their
share of the measured roofline; the audit's peer table shows every peer the report holds.
The session is written into the database before the server starts (no evaluation runs).
Screenshots: /tmp/shots/49-6.png and 49-7.png."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.domain.steering.session_judge import Judgement, confirm
from app.store.database import open_database
from app.store.models import BACKUP, CUDA, EVALUATED, LEADER, STOPPED, Candidate, Evaluation, Event, SteeringSession
from harness.report import EvaluationReport
from tests.app.domain.audit.test_ratios import retime_report
from tests.server_support import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, live_server, settings_for

pytestmark = BROWSER_MARKS
SHOTS = Path("/tmp/shots")
SOURCE = '#include "contract.h"\n// a kernel\n'
RETIME_FACT = "re-time vs leader #1: 7 of 10 scenarios timed, 1.091x over those 7"


def seed(data_dir: Path) -> None:
    """Session 1: leader #1 (its suite evaluation with cuDNN, FA2 and FA3) and #2, faster in its own
    run, re-timed against #1 with 3 of 10 scenarios untimed: a backup, the leader stays."""
    leader_suite = retime_report((), ratio=2.0)
    contender_suite = retime_report((), ratio=2.18)
    retime = retime_report((4, 5, 6), ratio=1.091)
    final = confirm(EvaluationReport.from_dict(retime), Judgement("contender", "", 2.18, needs_retime=True))
    assert final.verdict == BACKUP
    database = open_database(settings_for(data_dir))
    now = dt.datetime.now(dt.UTC)
    with database.session() as db:
        s = SteeringSession(title="re-time with untimed scenarios", agent="scripted", candidate_kind=CUDA,
                            status=STOPPED, leader_speedup=2.0, evaluations=2, finished_at=now)
        db.add(s)
        db.flush()
        sid = s.id or 0
        one = Candidate(session_id=sid, number=1, author="agent", title="the leader", source=SOURCE,
                        status=EVALUATED, verdict=LEADER, verdict_reason="correct and faster: 2.000x over the baseline",
                        speedup=2.0, visible_speedup=2.0, passed=10, scenario_count=10)
        db.add(one)
        db.flush()
        two = Candidate(session_id=sid, number=2, author="agent", title="the contender", source=SOURCE + "// v2\n",
                        parent_id=one.id, status=EVALUATED, verdict=BACKUP, verdict_reason=final.reason,
                        speedup=2.18, visible_speedup=2.18, passed=10, scenario_count=10, retime_speedup=1.091)
        db.add(two)
        db.flush()
        rows = [Evaluation(candidate_id=one.id or 0, purpose="suite", against="baseline", report=leader_suite,
                           device="NVIDIA H100 80GB HBM3", seconds=41.0),
                Evaluation(candidate_id=two.id or 0, purpose="suite", against="baseline", report=contender_suite,
                           device="NVIDIA H100 80GB HBM3", seconds=40.0),
                Evaluation(candidate_id=two.id or 0, purpose="retime", against="leader #1", report=retime,
                           device="NVIDIA H100 80GB HBM3", seconds=22.0)]
        db.add_all(rows)
        db.flush()
        payloads: list[tuple[str, dict[str, Any]]] = [
            ("session_created", {"title": s.title, "agent": "scripted", "candidate_kind": CUDA}),
            ("candidate", {"candidate_id": one.id, "number": 1, "title": one.title, "author": "agent"}),
            ("evaluation", {"number": 1, "purpose": "suite", "against": "baseline", "evaluation_id": rows[0].id,
                            "passed": 10, "scenarios": 10, "timed": 10, "speedup": 2.0}),
            ("verdict", {"number": 1, "verdict": LEADER, "reason": one.verdict_reason, "speedup": 2.0}),
            ("leader", {"number": 1, "speedup": 2.0}),
            ("candidate", {"candidate_id": two.id, "number": 2, "title": two.title, "author": "agent"}),
            ("evaluation", {"number": 2, "purpose": "suite", "against": "baseline", "evaluation_id": rows[1].id,
                            "passed": 10, "scenarios": 10, "timed": 10, "speedup": 2.18}),
            ("evaluation", {"number": 2, "purpose": "retime", "against": "leader #1", "evaluation_id": rows[2].id,
                            "passed": 10, "scenarios": 10, "timed": 7, "speedup": 1.091}),
            ("verdict", {"number": 2, "verdict": BACKUP, "reason": final.reason, "speedup": 2.18}),
        ]
        for seq, (kind, payload) in enumerate(payloads, 1):
            db.add(Event(session_id=sid, seq=seq, kind=kind, payload=payload))
        s.leader_id, s.last_seq = one.id, len(payloads)
        db.add(s)
        db.commit()
    database.engine.dispose()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("ratios")
    seed(data)
    with live_server(data) as base:
        yield base


@pytest.fixture
def page(server: str) -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 900})
            pg.set_default_timeout(15_000)
            yield pg
        finally:
            browser.close()


def test_a_retime_with_untimed_scenarios_says_how_many_were_timed_and_against_what(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{server}/sessions/1/candidates/2")
    expect(page.locator("#retime-fact")).to_have_text(RETIME_FACT)
    card = page.locator("section.evaluation[data-purpose='retime']")
    expect(card.locator("h2")).to_contain_text("Re-time against leader #1")
    chip = card.locator(".ratio-chip[data-part='all']")
    expect(chip).to_have_text("all: 10/10 passed; 7 of 10 timed against leader #1, 1.091x over those 7")
    expect(chip).to_have_class("pill ratio-chip partial")
    expect(card.locator(".untimed-note")).to_contain_text("No ratio against leader #1 on 3 of 10 passing scenarios")
    # The column names what the ratio is against, and which way it goes.
    column = card.locator("th.ratio-col")
    expect(column).to_have_text("x leader #1")
    assert column.get_attribute("title", timeout=5_000).startswith(
        "x leader #1 = leader #1 time / this kernel's time, per scenario; above 1 is faster than leader #1")
    expect(card.locator(".ratio-legend")).to_contain_text("x leader #1 = leader #1 time / this kernel's time")
    expect(card.locator("td .flag").first).to_have_text(
        "leader #1 not timed: leader #1 returned cudaErrorInvalidValue (1)")
    # The verdict: a backup, the reason counting what was timed.
    expect(page.locator("dl.facts")).to_contain_text("the re-time is incomplete: the previous leader was not timed "
                                                     "on 3 of 10 scenarios")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "49-6.png"), full_page=True)
    # The audit's candidate page says the same.
    page.goto(f"{server}/sessions/1/audit/candidates/2")
    expect(page.locator("#retime-fact")).to_have_text(RETIME_FACT)


def test_ratio_columns_peers_and_rooflines_are_explained(server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{server}/sessions/1/candidates/1")
    card = page.locator("section.evaluation[data-purpose='suite']")
    expect(card.locator("th.peer-col")).to_have_text(["x cuDNN", "x FA2", "x FA3"])
    fa3 = card.locator("th.peer-col[data-peer='fa3']")
    assert (fa3.get_attribute("title") or "").startswith(
        "x FA3 = FA3 time / this kernel's time, per scenario; above 1 is faster than FA3")
    expect(card.locator(".peer-chip[data-peer='fa3']")).to_have_text("x FA3: 0.700x over 6 of 10")
    expect(card.locator(".ratio-legend")).to_contain_text("x FA3 = FA3 time / this kernel's time")
    expect(card.locator(".ratio-legend")).to_contain_text("640 TFLOP/s matrix, 2900 GB/s copy")
    # 320 TFLOP/s on the first prefill row: 50% of the measured 640, the binding ceiling in bold.
    first = card.locator("tbody tr").first
    expect(first.locator("td").nth(4)).to_have_text("320.0 50%")
    expect(first.locator("td").nth(4).locator(".share.bound")).to_have_count(1)
    expect(card.locator("thead th").nth(4)).to_have_text("TFLOP/s · % roofline")
    card.scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "49-7.png"), full_page=True)
    # The audit's peer table: every peer the leader's report holds, with the same help.
    page.goto(f"{server}/sessions/1/audit")
    table = page.locator("#peer-table")
    expect(table.locator("th.peer-col")).to_have_text(["× cuDNN", "× FA2", "× FA3"])
    expect(table.locator("td.peer-fa3")).to_contain_text("0.700x (over 6 of 10 passed)")
    expect(page.locator("#peer-legend")).to_contain_text("above 1 the leader is faster than P")
    expect(table.locator("tbody tr").nth(2)).to_contain_text("(86% of measured copy)")  # decode 2500 of 2900 GB/s
    page.locator("#leader-peers").screenshot(path=str(SHOTS / "49-7-audit.png"))
