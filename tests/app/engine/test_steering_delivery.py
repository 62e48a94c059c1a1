"""Steering delivery: `steer` messages reach the agent at the next tool boundary, `queue`
messages when its turn ends, each in the order sent, each once; every message is recorded
with its author, kind and mode."""

from __future__ import annotations

from pathlib import Path

from app.store.models import PAUSED, RUNNING
from tests.server_support import cpu_session, events, running_app, wait_status


def delivered(evs: list[dict]) -> list[list[str]]:  # type: ignore[type-arg]
    return [e["payload"]["texts"] for e in evs if e["kind"] == "delivered"]


def agent_words(evs: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [e["payload"]["text"] for e in evs if e["kind"] == "agent_step"]


def test_steer_arrives_at_the_next_tool_boundary_and_queue_when_the_turn_ends(tmp_path: Path) -> None:
    steps = [{"say": "looking around", "list": True},
             {"say": "ending my turn", "end_turn": True},
             {"say": "next turn", "list": True}]
    with running_app(tmp_path) as client:
        s = cpu_session(client, steps, start=False)
        sid = s["id"]
        sent = (("S1 which layer?", "steer", "question"), ("Q1 the board says X", "queue", "information"),
                ("S2 and the memory pipeline?", "steer", "question"))
        for text, mode, kind in sent:
            r = client.post(f"/api/sessions/{sid}/interventions", json={"text": text, "mode": mode, "kind": kind,
                                                                        "author": "ana"})
            assert r.status_code == 201 and r.json()["status"] == "pending"
        client.post(f"/api/sessions/{sid}/start")
        wait_status(client, sid, PAUSED)  # the script runs out: a declared limit
        evs = events(client, sid)
        # S1 and S2 after the first tool call, in the order sent; Q1 only once the turn ended.
        assert delivered(evs) == [["S1 which layer?", "S2 and the memory pipeline?"], ["Q1 the board says X"]]
        words = agent_words(evs)
        assert words[1].startswith('I take the question "S1 which layer?" into account. '
                                   'I take the question "S2 and the memory pipeline?" into account.')
        assert words[2].startswith('I take the information "Q1 the board says X" into account.')
        items = client.get(f"/api/sessions/{sid}/interventions").json()
        assert [(i["author"], i["kind"], i["mode"], i["status"]) for i in items] == [
            ("ana", "question", "steer", "delivered"), ("ana", "information", "queue", "delivered"),
            ("ana", "question", "steer", "delivered")]
        # Delivered once each: no message appears in two deliveries.
        flat = [t for batch in delivered(evs) for t in batch]
        assert len(flat) == len(set(flat)) == 3


def test_a_question_sent_while_paused_answers_the_trigger_resumes_and_is_delivered(tmp_path: Path) -> None:
    steps = [{"say": "I think this is the limit.", "list": True}, {"say": "ok, trying more", "list": True},
             {"say": "and more", "list": True}]
    with running_app(tmp_path) as client:
        s = cpu_session(client, steps)
        sid = s["id"]
        paused = wait_status(client, sid, PAUSED)
        r = client.post(f"/api/sessions/{sid}/interventions",
                        json={"text": "What bounds the kernel now?", "resume": True})
        assert r.status_code == 201 and r.json()["trigger_id"] == paused["open_trigger_id"]
        assert client.get(f"/api/sessions/{sid}").json()["status"] in (RUNNING, PAUSED)
        wait_status(client, sid, PAUSED, timeout=30)
        evs = events(client, sid)
        assert delivered(evs) == [["What bounds the kernel now?"]]
        trig = client.get(f"/api/sessions/{sid}/triggers").json()[0]
        assert trig["resolved_at"] is not None and trig["resolution"] == "resumed by person"
        assert 'I take the question "What bounds the kernel now?" into account.' in agent_words(evs)[1]


def test_a_queued_message_waits_while_the_agent_keeps_calling_tools(tmp_path: Path) -> None:
    steps = [{"say": "a", "list": True}, {"say": "b", "list": True}, {"say": "c", "list": True}]
    with running_app(tmp_path) as client:
        s = cpu_session(client, steps, start=False)
        client.post(f"/api/sessions/{s['id']}/interventions", json={"text": "later", "mode": "queue"})
        client.post(f"/api/sessions/{s['id']}/start")
        wait_status(client, s["id"], PAUSED)
        evs = events(client, s["id"])
        # Delivered only after the script's last step ended the turn (no further step ran).
        assert delivered(evs) == [["later"]]
        assert [e["kind"] for e in evs].count("agent_step") == 5  # a, b, c, end of script, after "later"
