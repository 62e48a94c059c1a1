"""Fork through the JSON API (from a live python-cpu session), named authors, agents that
cannot start, the form's minutes budget, and the pages' errors and icon: a real app on a real
SQLite file, the scripted agent's CPU kernels evaluated by the harness's worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server_support import cpu_session, running_app, submit, wait_status


def test_fork_a_live_session_from_a_candidate_with_a_named_author(tmp_path: Path) -> None:
    steps = [submit("correct_5ms", "halve the overhead"), submit("correct_2ms", "overlap", parent=1),
             {"say": "I'm done.", "end_turn": True}]
    with running_app(tmp_path) as client:
        source = cpu_session(client, steps, title="source", thresholds={"plateau_window": 5})
        wait_status(client, source["id"], "paused")
        r = client.post(f"/api/sessions/{source['id']}/candidates/1/fork",
                        json={"title": "from the 5 ms kernel", "agent_config": {"steps": []}, "start": False,
                              "author": "Ada Lovelace", "budget": {"steps": 3}})
        assert r.status_code == 201, r.text
        fork = r.json()
        assert fork["leader_number"] == 1 and fork["status"] == "created"
        assert fork["baseline"] == source["baseline"] and fork["candidate_kind"] == "python-cpu"
        assert fork["budget"]["steps"] == 3 and fork["thresholds"]["plateau_window"] == 5  # copied
        first = client.get(f"/api/sessions/{source['id']}/candidates/1").json()
        seeded = client.get(f"/api/sessions/{fork['id']}/candidates/1").json()
        assert seeded["speedup"] == first["speedup"] and seeded["verdict"] == "leader"
        assert seeded["evaluations"] and seeded["evaluations"][0]["report"]["scenarios"]  # its evaluation came along
        forked = [e for e in client.get(f"/api/sessions/{fork['id']}/events").json() if e["kind"] == "forked"]
        assert forked[0]["payload"]["author"] == "Ada Lovelace"
        assert forked[0]["payload"]["from_session"] == source["id"] and forked[0]["payload"]["from_candidate"] == 1
        assert "Ada Lovelace" in client.get(f"/sessions/{source['id']}/audit").text  # the source's audit names it
        assert client.post(f"/api/sessions/{source['id']}/candidates/9/fork", json={}).status_code == 404

        # A name set once (the cookie) is the author of messages sent without one.
        r = client.post("/name", data={"name": "  Grace   Hopper ", "next": "/"}, follow_redirects=False)
        assert r.status_code == 303
        r = client.post(f"/api/sessions/{source['id']}/interventions", json={"text": "Why 2 ms?", "resume": False})
        assert r.status_code == 201 and r.json()["author"] == "Grace Hopper"
        r = client.post(f"/api/sessions/{source['id']}/interventions",
                        json={"text": "And 1 ms?", "resume": False, "author": "Linus"})
        assert r.json()["author"] == "Linus"  # the body's name wins
        client.post(f"/api/sessions/{source['id']}/stop")


def test_only_a_candidate_the_judge_found_correct_can_start_a_fork(tmp_path: Path) -> None:
    steps = [submit("missing_tail", "forgets the tail"), {"say": "I'm done.", "end_turn": True}]
    with running_app(tmp_path) as client:
        source = cpu_session(client, steps, title="source")
        wait_status(client, source["id"], "paused")
        assert client.get(f"/api/sessions/{source['id']}/candidates/1").json()["verdict"] == "rejected"
        before = len(client.get("/api/sessions").json())
        r = client.post(f"/api/sessions/{source['id']}/candidates/1/fork", json={})
        assert r.status_code == 422 and "cannot start a fork" in r.text and "rejected" in r.text
        assert len(client.get("/api/sessions").json()) == before  # nothing stored half-way


def test_an_agent_that_cannot_start_is_marked_and_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={"title": "claude", "agent": "claude"})
        assert r.status_code == 422 and "ANTHROPIC_API_KEY is not set" in r.json()["message"]
        assert client.get("/api/sessions").json() == []  # nothing written
        page = client.get("/").text
        assert "claude (cannot start: no API key)" in page and 'data-for="claude" data-unavailable=' in page


def test_the_form_explains_a_minutes_budget_in_minutes(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        r = client.post("/sessions", data={"title": "t", "agent": "offline", "budget_minutes": "-5"})
        assert r.status_code == 422
        error = r.text.split('id="form-error">', 1)[1].split("</p>", 1)[0]
        assert "must be more than 0 minutes, not -5" in error and "seconds" not in error


def test_a_missing_audit_is_a_404_page_and_the_icon_is_served(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        r = client.get("/sessions/99999/audit")  # a bare client: no Accept header asking for HTML
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
        assert "no session 99999" in r.text
        assert client.get("/api/sessions/99999").headers["content-type"].startswith("application/json")
        assert client.get("/favicon.ico").status_code == 200
        assert client.get("/static/favicon.svg").status_code == 200
        assert 'rel="icon"' in client.get("/").text
