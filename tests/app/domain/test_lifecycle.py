"""The session state machine: created -> running <-> paused -> done | stopped | failed, plus
interrupted after a restart; and the same rules enforced through the API (409, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.lifecycle import FINAL_STATES, InvalidTransition, can_transition, check_transition
from app.store.models import CREATED, DONE, FAILED, INTERRUPTED, PAUSED, RUNNING, STOPPED
from tests.server_support import cpu_session, events, kinds, running_app, submit, wait_status


@pytest.mark.parametrize(("current", "target"), [
    (CREATED, RUNNING), (RUNNING, PAUSED), (PAUSED, RUNNING), (RUNNING, DONE), (RUNNING, STOPPED),
    (PAUSED, STOPPED), (RUNNING, FAILED), (RUNNING, INTERRUPTED), (INTERRUPTED, RUNNING),
    (INTERRUPTED, STOPPED), (CREATED, STOPPED),
])
def test_allowed_transitions(current: str, target: str) -> None:
    assert can_transition(current, target)
    check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), [
    (CREATED, PAUSED), (PAUSED, DONE), (DONE, RUNNING), (STOPPED, RUNNING), (FAILED, RUNNING),
    (INTERRUPTED, PAUSED), (CREATED, DONE),
])
def test_forbidden_transitions_raise_with_what_is_allowed(current: str, target: str) -> None:
    assert not can_transition(current, target)
    with pytest.raises(InvalidTransition, match=f"a {current} session cannot become {target}"):
        check_transition(current, target)


def test_final_states_are_done_stopped_failed() -> None:
    assert frozenset({DONE, STOPPED, FAILED}) == FINAL_STATES


def test_session_goes_created_running_paused_running_stopped_through_the_api(tmp_path: Path) -> None:
    steps = [submit("correct_10ms")] * 6
    with running_app(tmp_path) as client:
        s = cpu_session(client, steps, start=False)
        assert s["status"] == CREATED
        assert client.post(f"/api/sessions/{s['id']}/pause").status_code == 409
        assert client.post(f"/api/sessions/{s['id']}/start").json()["status"] == RUNNING
        trigger = client.post(f"/api/sessions/{s['id']}/pause", json={"author": "ana", "reason": "look"}).json()
        assert trigger["kind"] == "manual" and "ana" in trigger["summary"]
        assert wait_status(client, s["id"], PAUSED)["open_trigger_id"] == trigger["id"]
        assert client.post(f"/api/sessions/{s['id']}/resume").json()["status"] == RUNNING
        assert client.post(f"/api/sessions/{s['id']}/stop").json()["status"] == STOPPED
        before = events(client, s["id"])
        r = client.post(f"/api/sessions/{s['id']}/resume")
        assert r.status_code == 409 and "stopped" in r.json()["message"]
        assert events(client, s["id"]) == before  # a refused action writes nothing
        statuses = [(e["payload"]["from"], e["payload"]["to"]) for e in before if e["kind"] == "status"]
        assert statuses == [(CREATED, RUNNING), (RUNNING, PAUSED), (PAUSED, RUNNING), (RUNNING, STOPPED)]
        assert "trigger" in kinds(before)
