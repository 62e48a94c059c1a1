"""The JSON API: validation errors are 422 with a readable message and write nothing;
unknown things are 404, actions that the state forbids 409; the OpenAPI document lists
every route; the new-session form and pages work over the same domain code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.server_support import cpu_session, running_app

GOOD: dict[str, Any] = {"title": "ok", "agent_config": {"steps": [{"say": "x", "list": True}]},
                        "candidate_kind": "python-cpu", "baseline": "tests.cpu_kernels:correct_10ms",
                        "start": False}


def row_counts(client: TestClient) -> tuple[int, int]:
    sessions = client.get("/api/sessions").json()
    return len(sessions), sum(s["last_seq"] for s in sessions)


@pytest.mark.parametrize(("change", "message"), [
    ({"title": ""}, "title: String should have at least 1 character"),
    ({"title": "   "}, "title: Value error, the title must not be blank"),
    ({"goal_metric": "vs_magic"}, "unknown goal metric 'vs_magic'"),
    ({"goal_target": -1}, "goal_target: Input should be greater than 0"),
    ({"agent": "oracle"}, "unknown agent 'oracle'"),
    ({"agent_config": {"script": "nope"}}, "unknown script 'nope'"),
    ({"agent_config": {"steps": [{"jump": 1}]}}, "step 1: unknown key(s) jump"),
    ({"candidate_kind": "fortran"}, "candidate_kind: Input should be 'cuda' or 'python-cpu'"),
    ({"baseline": "not a target"}, "needs a baseline given as module:function"),
    ({"thresholds": {"plateau_window": 0}}, "thresholds.plateau_window: Input should be greater than or equal to 1"),
    ({"budget": {"steps": 0}}, "budget.steps: Input should be greater than or equal to 1"),
    ({"surprise": True}, "surprise: Extra inputs are not permitted"),
    ({"candidate_kind": "cuda", "baseline": None, "suite_filter": "head_dim=seven"}, "head_dim is a number"),
    ({"candidate_kind": "cuda", "baseline": None, "suite_filter": "no-such-scenario-name"}, "no scenario matches"),
    ({"candidate_kind": "cuda", "baseline": "kernels/missing.cu"}, "baseline kernel does not exist"),
])
def test_invalid_session_is_refused_with_422_and_nothing_written(tmp_path: Path, change: dict[str, Any],
                                                                  message: str) -> None:
    with running_app(tmp_path) as client:
        cpu_session(client, [{"say": "x", "list": True}], start=False)
        before = row_counts(client)
        r = client.post("/api/sessions", json={**GOOD, **change})
        assert r.status_code == 422, r.text
        body = r.json()
        assert message in body["message"], body
        assert isinstance(body["detail"], list) and body["detail"]
        assert row_counts(client) == before


def test_python_candidates_are_refused_unless_the_server_allows_them(tmp_path: Path) -> None:
    with running_app(tmp_path, allow_python_candidates=False) as client:
        r = client.post("/api/sessions", json=GOOD)
        assert r.status_code == 422 and "python-cpu candidates are disabled" in r.json()["message"]
        assert client.get("/api/sessions").json() == []


def test_invalid_messages_are_refused_and_nothing_written(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [{"say": "x", "list": True}], start=False)["id"]
        before = client.get(f"/api/sessions/{sid}").json()["last_seq"]
        for body, message in (({"text": ""}, "text: String should have at least 1 character"),
                              ({"text": "  "}, "the message must not be blank"),
                              ({"text": "q", "mode": "shout"}, "mode: Input should be 'steer' or 'queue'"),
                              ({"text": "q", "kind": "order"}, "kind: Input should be 'question' or 'information'")):
            r = client.post(f"/api/sessions/{sid}/interventions", json=body)
            assert r.status_code == 422 and message in r.json()["message"], r.text
        assert client.get(f"/api/sessions/{sid}/interventions").json() == []
        assert client.get(f"/api/sessions/{sid}").json()["last_seq"] == before


def test_unknown_things_are_404_and_forbidden_actions_409(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        assert client.get("/api/sessions/42").status_code == 404
        assert client.post("/api/sessions/42/interventions", json={"text": "hi"}).status_code == 404
        sid = cpu_session(client, [{"say": "x", "list": True}], start=False)["id"]
        assert client.get(f"/api/sessions/{sid}/candidates/3").status_code == 404
        r = client.post(f"/api/sessions/{sid}/resume")
        assert r.status_code == 409 and "only a paused or interrupted session" in r.json()["message"]
        page = client.get("/sessions/42", headers={"accept": "text/html"})
        assert page.status_code == 404 and "no session 42" in page.text


def test_openapi_document_lists_the_api(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        paths = client.get("/openapi.json").json()["paths"]
        for path in ("/api/sessions", "/api/sessions/{session_id}", "/api/sessions/{session_id}/pause",
                     "/api/sessions/{session_id}/resume", "/api/sessions/{session_id}/stop",
                     "/api/sessions/{session_id}/interventions", "/api/sessions/{session_id}/events",
                     "/api/sessions/{session_id}/candidates/{number}", "/api/sessions/{session_id}/triggers"):
            assert path in paths
        index = client.get("/api").text
        assert "/api/sessions/{session_id}/interventions" in index


def test_the_new_session_form_starts_a_session_or_explains_what_is_wrong(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        bad = client.post("/sessions", data={"title": "x", "agent": "scripted", "script": "gpu-demo",
                                             "goal_target": "fast"})
        assert bad.status_code == 422 and "goal target: &#39;fast&#39; is not a number" in bad.text
        assert client.get("/api/sessions").json() == []
        ok = client.post("/sessions", data={"title": "demo", "agent": "scripted", "script": "cpu-demo",
                                            "plateau_window": "5"}, follow_redirects=False)
        assert ok.status_code == 303 and ok.headers["location"] == "/sessions/1"
        s = client.get("/api/sessions/1").json()
        assert s["candidate_kind"] == "python-cpu" and s["thresholds"]["plateau_window"] == 5
        assert s["thresholds"]["min_leader_gain"] == 0.25  # the script's default, not overridden
        client.post("/api/sessions/1/stop")


def test_candidate_page_shows_the_diff_against_its_parent_and_per_scenario_results(tmp_path: Path) -> None:
    from tests.server_support import wait_status

    steps = [{"say": "a", "submit": {"target": "tests.cpu_kernels:correct_5ms", "title": "first"}},
             {"say": "b", "submit": {"target": "tests.cpu_kernels:correct_2ms", "title": "second", "parent": 1}},
             {"say": "I'm done.", "end_turn": True}]
    with running_app(tmp_path) as client:
        sid = cpu_session(client, steps)["id"]
        wait_status(client, sid, "paused")
        page = client.get(f"/sessions/{sid}/candidates/2").text
        assert "Diff against #1" in page
        assert '<span class="del">-tests.cpu_kernels:correct_5ms</span>' in page
        assert '<span class="add">+tests.cpu_kernels:correct_2ms</span>' in page
        assert "cpu-chunk-hidden" in page and "hidden</span>" in page  # a person sees hidden results
        detail = client.get(f"/api/sessions/{sid}/candidates/2").json()
        assert detail["parent_number"] == 1 and detail["evaluations"][0]["report"]["scenarios"]
        # The agent saw only visible scenarios.
        results = [e for e in client.get(f"/api/sessions/{sid}/events").json() if e["kind"] == "tool_result"]
        assert all("cpu-chunk-hidden" not in e["payload"]["text"] for e in results)
        assert "Hidden scenarios (not shown to you): 1/1 passed." in results[0]["payload"]["text"]


def test_a_bad_address_is_answered_in_words(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        page = client.get("/sessions/abc", headers={"accept": "text/html"})
        api = client.get("/api/sessions/abc/candidates")
        query = client.get("/api/sessions/1/events?after=soon")
    assert page.status_code == 422
    assert "the session in the address must be a whole number, not &#39;abc&#39;" in page.text
    assert api.json()["message"] == "the session in the address must be a whole number, not 'abc'"
    assert api.json()["detail"][0]["loc"] == ["path", "session_id"]  # machines keep the structured form
    assert query.status_code == 422 and query.json()["message"].startswith("the after (?after=) must be a whole number")
