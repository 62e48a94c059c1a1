"""Steering triggers: each one as a pure check with its thresholds and evidence, then each one
pausing a real session (scripted agent, CPU kernels evaluated by the harness's workers)."""

from __future__ import annotations

from pathlib import Path

from app.domain.steering.triggers import (
    Budget,
    BudgetUse,
    EvaluationPoint,
    Thresholds,
    check_budget,
    check_declared_limit,
    check_plateau,
    check_suspicious_win,
)
from app.store.models import BUDGET, DECLARED_LIMIT, LEADER, MANUAL, PAUSED, PLATEAU, SUSPICIOUS_WIN
from tests.server_support import cpu_session, running_app, submit, wait_status

T = Thresholds(plateau_window=3, plateau_min_gain=0.05, suspicious_jump=3.0)


def pt(n: int, verdict: str, speedup: float | None, leader: float | None) -> EvaluationPoint:
    return EvaluationPoint(n, verdict, speedup, leader)


def test_plateau_fires_after_the_window_without_a_new_leader_with_the_window_as_evidence() -> None:
    points = [pt(1, LEADER, 2.0, 2.0), pt(2, "backup", 1.9, 2.0), pt(3, "rejected", None, 2.0),
              pt(4, "backup", 2.0, 2.0)]
    assert check_plateau(points[:3], None, T) is None
    hit = check_plateau(points, None, T)
    assert hit is not None and hit.kind == PLATEAU
    assert [p["number"] for p in hit.evidence["window"]] == [2, 3, 4]
    assert "no new leader in the last 3 evaluations" in hit.summary


def test_plateau_fires_when_new_leaders_gain_too_little() -> None:
    points = [pt(1, LEADER, 2.0, 2.0), pt(2, LEADER, 2.02, 2.02), pt(3, "backup", 1.0, 2.02),
              pt(4, LEADER, 2.05, 2.05)]
    hit = check_plateau(points, None, T)
    assert hit is not None and "gained only 2.5%" in hit.summary
    assert check_plateau(points, None, Thresholds(plateau_window=3, plateau_min_gain=0.01)) is None


def test_declared_limit_phrases_are_found_in_the_agent_words() -> None:
    for words in ("I believe this is the limit of the hardware.", "It cannot be made any faster.",
                  "We are at the theoretical limit", "I'm done."):
        hit = check_declared_limit(words, T)
        assert hit is not None and hit.kind == DECLARED_LIMIT and hit.evidence["words"] == words
    assert check_declared_limit("Next I will try a different tile size.", T) is None
    assert check_declared_limit("this is the limit", Thresholds(declared_limit_words=False)) is None


def test_suspicious_win_on_a_jump_over_the_leader_or_on_a_sanity_flag() -> None:
    hit = check_suspicious_win(7, 9.0, 2.0, [], T)
    assert hit is not None and hit.kind == SUSPICIOUS_WIN and hit.evidence["jump"] == 4.5
    assert check_suspicious_win(7, 5.0, 2.0, [], T) is None
    assert check_suspicious_win(7, 9.0, 2.0, [], T, correct=False) is None  # a failing kernel wins nothing
    flagged = check_suspicious_win(8, 1.1, 1.0, ["s: impossible: under the roofline"], T, correct=False)
    assert flagged is not None and flagged.evidence["flags"] == ["s: impossible: under the roofline"]


def test_budget_pauses_on_the_first_budget_reached() -> None:
    assert check_budget(BudgetUse(3, 100, 0.5, 10), Budget(steps=4, tokens=1000)) is None
    hit = check_budget(BudgetUse(4, 100, 0.5, 10), Budget(steps=4, seconds=5))
    assert hit is not None and hit.kind == BUDGET and hit.evidence == {"budget": "steps", "used": 4, "limit": 4}
    assert check_budget(BudgetUse(1, 1, 2.5, 1), Budget(cost_usd=2.0)) is not None


# -- each trigger pausing a real session ------------------------------------------------------


def test_plateau_pauses_a_session_and_evidence_lists_the_window(tmp_path: Path) -> None:
    steps = [submit("correct_5ms"), submit("correct_5ms_retiled"), submit("missing_tail"),
             submit("correct_5ms_retiled"), submit("correct_2ms")]
    with running_app(tmp_path) as client:
        s = cpu_session(client, steps, thresholds={"plateau_window": 3, "min_leader_gain": 0.25})
        state = wait_status(client, s["id"], PAUSED)
        trigger = client.get(f"/api/sessions/{s['id']}/triggers").json()[-1]
        assert trigger["kind"] == PLATEAU, trigger
        assert [p["number"] for p in trigger["evidence"]["window"]] == [2, 3, 4]
        assert trigger["suggestions"], "the pause offers questions"
        assert state["leader_number"] == 1 and state["evaluations"] == 4
        verdicts = [c["verdict"] for c in client.get(f"/api/sessions/{s['id']}/candidates").json()]
        assert verdicts == ["leader", "backup", "rejected", "backup"]


def test_declared_limit_pauses_on_agent_words_and_on_declare_done(tmp_path: Path) -> None:
    steps = [{"say": "Honestly, this is the limit of what can be done.", "list": True},
             {"say": "Still sure.", "declare_done": "memory bound"}]
    with running_app(tmp_path) as client:
        s = cpu_session(client, steps)
        wait_status(client, s["id"], PAUSED)
        first = client.get(f"/api/sessions/{s['id']}/triggers").json()[-1]
        assert first["kind"] == DECLARED_LIMIT and first["evidence"]["source"] == "agent text"
        client.post(f"/api/sessions/{s['id']}/resume")
        wait_status(client, s["id"], PAUSED)
        second = client.get(f"/api/sessions/{s['id']}/triggers").json()[-1]
        assert second["id"] != first["id"]
        assert second["evidence"] == {"words": "memory bound", "source": "declare_done tool call"}


def test_suspicious_win_pauses_after_a_jump_over_the_threshold(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        s = cpu_session(client, [submit("correct_2ms")], thresholds={"suspicious_jump": 1.5})
        wait_status(client, s["id"], PAUSED)
        trigger = client.get(f"/api/sessions/{s['id']}/triggers").json()[-1]
        assert trigger["kind"] == SUSPICIOUS_WIN and trigger["evidence"]["candidate"] == 1
        assert trigger["evidence"]["jump"] > 1.5


def test_budget_pauses_and_resume_needs_a_raised_budget(tmp_path: Path) -> None:
    steps = [{"say": "one", "list": True}, {"say": "two", "list": True}, {"say": "three", "list": True}]
    with running_app(tmp_path) as client:
        s = cpu_session(client, steps, budget={"steps": 2})
        state = wait_status(client, s["id"], PAUSED)
        assert state["used"]["steps"] == 2
        trigger = client.get(f"/api/sessions/{s['id']}/triggers").json()[-1]
        assert trigger["kind"] == BUDGET and trigger["evidence"]["budget"] == "steps"
        r = client.post(f"/api/sessions/{s['id']}/resume")
        assert r.status_code == 409 and "raise the budget" in r.json()["message"]
        client.patch(f"/api/sessions/{s['id']}", json={"budget": {"steps": 10}})
        assert client.post(f"/api/sessions/{s['id']}/resume").status_code == 200
        wait_status(client, s["id"], PAUSED)  # the script ends: a declared limit, not a failure
        assert client.get(f"/api/sessions/{s['id']}/triggers").json()[-1]["kind"] == DECLARED_LIMIT


def test_manual_pause_records_who_paused(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        s = cpu_session(client, [submit("correct_10ms")] * 3)
        trigger = client.post(f"/api/sessions/{s['id']}/pause", json={"author": "bo"}).json()
        assert trigger["kind"] == MANUAL and trigger["evidence"]["author"] == "bo"
