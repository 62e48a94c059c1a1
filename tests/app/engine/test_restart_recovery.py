"""Restart recovery on a real SQLite file: a running session comes back interrupted with a
one-click resume and continues where it was; a paused one stays paused; no event is lost
or doubled, and no candidate is created twice."""

from __future__ import annotations

import time
from pathlib import Path

from app.store.models import INTERRUPTED, PAUSED
from tests.server_support import cpu_session, events, kinds, running_app, submit, wait_for, wait_status


def assert_gapless(evs: list[dict]) -> None:  # type: ignore[type-arg]
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))


def test_running_session_is_interrupted_by_a_restart_and_resumes_where_it_was(tmp_path: Path) -> None:
    steps = [submit("correct_5ms", "first"), submit("correct_5ms_retiled", "second")]
    with running_app(tmp_path) as client:
        sid = cpu_session(client, steps, thresholds={"min_leader_gain": 0.25})["id"]
        wait_for(client, sid, lambda s: s["detail"].startswith("evaluating candidate #1"), what="evaluation")
        before = events(client, sid)
    assert (tmp_path / "socratic.db").is_file()

    with running_app(tmp_path) as client:
        state = client.get(f"/api/sessions/{sid}").json()
        assert state["status"] == INTERRUPTED and "restarted" in state["detail"]
        after = events(client, sid)
        assert after[:len(before)] == before  # nothing lost, nothing rewritten
        assert kinds(after[len(before):]) == ["status"]
        page = client.get("/").text
        assert f'action="/sessions/{sid}/resume"' in page  # the dashboard's one-click resume
        r = client.post(f"/sessions/{sid}/resume", follow_redirects=False)
        assert r.status_code == 303
        wait_status(client, sid, PAUSED)  # the script runs out after candidate #2
        final = events(client, sid)
        assert_gapless(final)
        candidates = client.get(f"/api/sessions/{sid}/candidates").json()
        assert [(c["number"], c["title"], c["status"]) for c in candidates] == [
            (1, "first", "evaluated"), (2, "second", "evaluated")]
        assert [e["payload"]["number"] for e in final if e["kind"] == "candidate"] == [1, 2]
        assert [e["payload"]["number"] for e in final if e["kind"] == "verdict"] == [1, 2]
        assert candidates[0]["verdict"] == "leader"


def test_paused_session_stays_paused_across_a_restart_and_resumes_its_agent(tmp_path: Path) -> None:
    steps = [{"say": "I am done.", "list": True}, {"say": "more after the question", "list": True}]
    with running_app(tmp_path) as client:
        sid = cpu_session(client, steps)["id"]
        paused = wait_status(client, sid, PAUSED)
        before = events(client, sid)
    with running_app(tmp_path) as client:
        state = client.get(f"/api/sessions/{sid}").json()
        assert state["status"] == PAUSED and state["open_trigger_id"] == paused["open_trigger_id"]
        assert events(client, sid) == before
        assert 'data-trigger="declared_limit"' in client.get(f"/sessions/{sid}").text
        client.post(f"/api/sessions/{sid}/interventions", json={"text": "Why done?"})
        wait_for(client, sid, lambda s: s["status"] == PAUSED and s["open_trigger_id"] != paused["open_trigger_id"],
                 what="the next pause")
        evs = events(client, sid)
        assert_gapless(evs)
        steps_seen = [e["payload"]["text"] for e in evs if e["kind"] == "agent_step"]
        assert steps_seen[0] == "I am done."
        assert steps_seen[1] == 'I take the question "Why done?" into account. more after the question'


def test_restart_during_a_pause_keeps_pending_messages_pending(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [{"say": "this is the limit", "list": True}])["id"]
        wait_status(client, sid, PAUSED)
        client.post(f"/api/sessions/{sid}/interventions", json={"text": "kept", "resume": False})
        time.sleep(0.2)
    with running_app(tmp_path) as client:
        items = client.get(f"/api/sessions/{sid}/interventions").json()
        assert [(i["text"], i["status"]) for i in items] == [("kept", "pending")]
