"""Lessons distilled in the background (app/services/distiller.py) while a real server runs a
session, and used by the next one: a measured offline session on the synthetic H100 leaves
lessons whose evidence links to it; the next session's agent is given them at its start (the
`knowledge` event, its cost) and takes a lesson's action first; `read_lessons` finds them; a
distillation that fails is counted and never reaches a session."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from sqlmodel import select

from app.domain.lessons import Distilled, distill_candidates, distill_session, facts_of_candidates
from app.engine.agents.base import READ_LESSONS, Task, ToolCall
from app.engine.runner_state import RunnerState
from app.engine.tools.base import ToolContext
from app.engine.tools.table import dispatch
from app.services.distiller import LessonDistiller
from app.store.database import open_database
from app.store.models import PAUSED
from lessons.models import Lesson
from tests.app.engine.agents.test_offline_measured import SCENARIOS
from tests.family_model import SyntheticEvaluator
from tests.server_support import events, running_app, settings_for
from tests.waiting import wait_until

BODY = {"agent": "offline", "scenarios": [{k: v for k, v in s.to_dict().items() if k not in ("model", "tags")}
                                          for s in SCENARIOS],
        "thresholds": {"plateau_window": 3, "suspicious_jump": 50}}


def run_session(client: Any, title: str, evaluations: int, config: dict[str, Any]) -> int:
    r = client.post("/api/sessions", json={**BODY, "title": title, "agent_config": config})
    assert r.status_code == 201, r.text
    sid = int(r.json()["id"])

    def progressed() -> bool:
        s = client.get(f"/api/sessions/{sid}").json()
        if s["status"] == PAUSED:
            client.post(f"/api/sessions/{sid}/resume", json={"author": "test"})
        return bool(s["evaluations"] >= evaluations)

    wait_until(progressed, 120, f"{evaluations} evaluations of {title}")
    client.post(f"/api/sessions/{sid}/stop", json={"author": "test"})
    return sid


def test_a_session_teaches_the_next_one_through_lessons_distilled_in_the_background(tmp_path: Path) -> None:
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator(hopper=True)) as client:
        ctx = client.app.state.engine.ctx  # type: ignore[attr-defined]
        first = run_session(client, "first", 8, {"seed": 0})
        assert ctx.lessons.drain(30)
        with ctx.database.session() as db:
            lessons = list(db.exec(select(Lesson)))
        assert lessons and ctx.lessons.stats.failures == 0 and ctx.lessons.stats.runs >= 1
        assert all(e["session_id"] == first for x in lessons for e in x.evidence)
        paid = [x for x in lessons if x.ratio > 1.01 and x.action["kind"] == "knobs"]
        assert paid, [x.text for x in lessons]

        second = run_session(client, "second", 3, {"seed": 1})
        evs = events(client, second)
        knowledge = [e["payload"] for e in evs if e["kind"] == "knowledge"]
        assert knowledge and knowledge[0]["what"] == "prompt" and knowledge[0]["priors"] >= len(paid)
        cands = client.get(f"/api/sessions/{second}/candidates").json()
        notes = [client.get(f"/api/sessions/{second}/candidates/{c['number']}").json()["notes"] for c in cands]
        assert any("lesson #" in n for n in notes[1:3]), notes

        task = Task("attention-forward", "cuda", "", "", BODY["scenarios"])
        tools = ToolContext(second, ctx, RunnerState(), threading.Event(), task, cast(Any, None))
        result = asyncio.run(dispatch(ToolCall(READ_LESSONS, {"query": "wgmma", "limit": 3}, "r1"), tools))
        assert result.ok and result.data["lessons"] and "[lesson " in result.text
        refused = asyncio.run(dispatch(ToolCall(READ_LESSONS, {"limit": 99}, "r2"), tools))
        assert not refused.ok and "between 1 and 20" in refused.text
        read = [e["payload"] for e in events(client, second) if e["kind"] == "knowledge"
                and e["payload"]["what"] == READ_LESSONS]
        assert read and read[0]["tokens"] > 0 and read[0]["seconds"] >= 0


def test_a_failing_distillation_is_counted_and_the_next_one_still_runs(tmp_path: Path) -> None:
    database = open_database(settings_for(tmp_path))
    distiller = LessonDistiller(database)
    distiller.schedule(404)  # no such session
    assert distiller.drain(10)
    assert distiller.stats.failures == 1 and "404" in distiller.stats.last["error"]
    disabled = LessonDistiller(database, enabled=False)
    disabled.schedule(1)
    assert disabled.drain(1) and disabled.stats.runs == 0
    distiller.close()
    database.dispose()


def test_each_judged_candidate_is_distilled_alone_and_the_whole_session_adds_nothing(tmp_path: Path) -> None:
    """After a verdict the distiller reads that candidate and its parent only (the cost of one
    candidate, however long the session); the session's end then distils it whole, and that
    finds every observation already merged."""
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator(hopper=True), lessons_distill=False) as client:
        sid = run_session(client, "alone", 7, {"seed": 0})
        ctx = client.app.state.engine.ctx  # type: ignore[attr-defined]
        numbers = [c["number"] for c in client.get(f"/api/sessions/{sid}/candidates").json()]
        with ctx.database.session() as db:
            assert not list(db.exec(select(Lesson)))  # distillation off: nothing yet
            one_by_one = [distill_candidates(db, sid, [n]).observations for n in numbers]
            db.commit()
            assert all(found <= 1 for found in one_by_one) and sum(one_by_one) >= 3
            facts = facts_of_candidates(db, sid, [numbers[-1]])
            assert facts is not None and len(facts.candidates) <= 2  # the candidate and its parent
            whole = distill_session(db, sid)
            assert whole.observations == sum(one_by_one)
            assert (whole.result.created, whole.result.updated) == (0, 0)
            assert whole.result.unchanged == whole.observations


def test_requests_coalesce_per_session_and_a_whole_session_request_covers_candidates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import app.services.distiller as module

    ran: list[tuple[int, list[int] | None]] = []
    entered, release = threading.Event(), threading.Event()

    def candidates(db: Any, session_id: int, numbers: Any) -> Distilled:
        ran.append((session_id, sorted(numbers)))
        entered.set()
        release.wait(10)  # the first run holds the worker while the requests below arrive
        return Distilled()

    def whole(db: Any, session_id: int) -> Distilled:
        ran.append((session_id, None))
        return Distilled()

    monkeypatch.setattr(module, "distill_candidates", candidates)
    monkeypatch.setattr(module, "distill_session", whole)
    database = open_database(settings_for(tmp_path))
    distiller = LessonDistiller(database)
    try:
        distiller.schedule(1, 3)
        assert entered.wait(10)
        for session_id, number in ((1, 4), (2, 5), (2, None), (2, 6), (1, 7)):
            distiller.schedule(session_id, number)
        release.set()
        assert distiller.drain(10)
    finally:
        distiller.close()
        database.dispose()
    # session 1's later candidates in one run; session 2's whole-session request covered its two
    assert ran == [(1, [3]), (1, [4, 7]), (2, None)]
    assert distiller.stats.runs == 3 and distiller.stats.last["session"] == 2
    assert "candidates" not in distiller.stats.last
