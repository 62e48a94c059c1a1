"""A fork continues from the forked candidate (issue 49, point 8): the offline agent starts from
the kernel's knob setting and does not measure it (nor the first port) again; a model's working
copy holds the kernel's source; and the fork form is the new-session form, the source's settings
filled in. Offline sessions run on the synthetic H100 of tests/family_model.py (no GPU); Claude
runs through the real SDK against tests/claude_fake.py."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine.agents.base import PROFILE, READ_KERNEL, SUBMIT_CANDIDATE, Feedback, Task
from app.engine.agents.offline import FIRST_PORT, OfflineAgent, start_knobs, start_spec
from app.engine.runner_state import RunnerState
from app.engine.tools.workspace import load_draft
from app.store.models import LEADER, SteeringSession
from harness.scenario import Scenario
from kernels.attention.family import knobs_from_mapping, parse_knobs, render
from tests.claude_fake import FakeMessagesAPI, message, serve_claude_from, text, tool_use, user_blocks
from tests.family_model import SyntheticEvaluator, knobs_of_source
from tests.server_support import cpu_session, events, running_app, submit, wait_for

SCENARIOS = [
    Scenario("prefill-d128-s4096-causal", "prefill", 4, 4096, 4096, 16, 16, 128, causal=True),
    Scenario("prefill-d64-s2048-full", "prefill", 8, 2048, 2048, 32, 32, 64, causal=False),
    Scenario("decode-d128-b16-k8192", "decode", 16, 1, 8192, 32, 8, 128, causal=True),
]
PORT = start_knobs("first-port")
# the first port with two changes that pay on the synthetic GPU: the kernel a fork continues from
BETTER = parse_knobs("stages=2,causal_skip=true", PORT, files=False)


def scenario_rows() -> list[dict[str, Any]]:
    return [{k: v for k, v in s.to_dict().items() if k not in ("model", "tags")} for s in SCENARIOS]


def family_source_session(client: TestClient) -> dict[str, Any]:
    """A scripted session of two family kernels: the first port (#1), then BETTER (#2, the leader)."""
    steps = [{"say": "the port", "submit": {"source": render(PORT), "title": "first port"}},
             {"say": "two changes", "submit": {"source": render(BETTER), "title": "stages=2, causal_skip"}},
             {"say": "I'm done.", "end_turn": True}]
    r = client.post("/api/sessions", json={"title": "family source", "agent": "scripted",
                                           "agent_config": {"steps": steps}, "scenarios": scenario_rows(),
                                           "thresholds": {"suspicious_jump": 50}})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    wait_for(client, sid, lambda s: s["leader_number"] == 2 and s["status"] != "running", 60, "the source's leader #2")
    return dict(r.json())


def test_start_spec_round_trips_and_names_only_what_differs_from_the_defaults() -> None:
    assert start_spec(PORT.to_dict()) and start_knobs(start_spec(PORT.to_dict())) == PORT
    assert start_knobs(start_spec(BETTER.to_dict())) == BETTER
    assert start_spec(start_knobs("default").to_dict()) == "default"
    assert start_knobs(FIRST_PORT) == PORT


def test_the_offline_agent_continues_from_a_leader_of_its_start_setting() -> None:
    """Unit: a task whose leader records the start setting: the first step submits nothing it
    knows (the measured strategy profiles the leader first, then measures a neighbour)."""
    leader = {"number": 1, "title": "forked", "source": render(BETTER), "speedup": 9.0, "visible_speedup": 8.5,
              "origin": "forked from session 1 candidate #2 (there: leader)"}
    task = Task("attention-forward", "cuda", "no goal", "", [s.to_dict() for s in SCENARIOS], leader=leader)
    for strategy in ("measured", "greedy"):
        agent = OfflineAgent(task, {"start": start_spec(BETTER.to_dict()), "strategy": strategy})
        step = asyncio.run(agent.step(Feedback()))
        assert "I continue from the leader, candidate #1" in step.text and "8.500x" in step.text
        if strategy == "measured":
            assert [c.name for c in step.tool_calls] == [PROFILE]
            continue
        [call] = step.tool_calls
        assert call.name == SUBMIT_CANDIDATE and call.args["parent"] == "leader"
        knobs = knobs_from_mapping(knobs_of_source(call.args["source"]) or {})
        assert knobs not in (BETTER, PORT)
        assert sum(a != b for a, b in zip(knobs.to_dict().values(), BETTER.to_dict().values(), strict=True)) == 1
    # A leader of another setting (not what it starts from) changes nothing: it submits its start.
    agent = OfflineAgent(task, {"strategy": "greedy"})
    step = asyncio.run(agent.step(Feedback()))
    assert step.tool_calls[0].args["title"] == "first port"


def test_an_offline_fork_starts_from_the_forked_candidates_knobs_not_the_first_port(tmp_path: Path) -> None:
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator(hopper=True)) as client:
        source = family_source_session(client)
        r = client.post(f"/api/sessions/{source['id']}/candidates/2/fork",
                        json={"agent": "offline", "agent_config": {"seed": 0}, "author": "ada"})
        assert r.status_code == 201, r.text
        fork = r.json()
        assert fork["agent_config"]["start"] == start_spec(BETTER.to_dict())
        fid = fork["id"]
        wait_for(client, fid, lambda s: s["evaluations"] >= 1, 60, "the fork's first evaluation")
        client.post(f"/api/sessions/{fid}/stop", json={"author": "test"})
        cands = client.get(f"/api/sessions/{fid}/candidates").json()
        details = [client.get(f"/api/sessions/{fid}/candidates/{c['number']}").json() for c in cands]
        evs = events(client, fid)
    assert details[0]["verdict"] == LEADER and details[0]["source"] == render(BETTER)  # the forked kernel leads
    first = details[1]
    knobs = knobs_from_mapping(knobs_of_source(first["source"]) or {})
    assert knobs != PORT and knobs != BETTER, "the fork measured the first port or the forked kernel again"
    # one knob away from the forked kernel: the search goes on from it (the synthetic H100's mma=wgmma)
    assert [k for k, v in knobs.to_dict().items() if BETTER.to_dict()[k] != v] == ["mma"]
    assert all(d["source"] not in (render(PORT), render(BETTER)) for d in details[1:])
    steps = [e["payload"] for e in evs if e["kind"] == "agent_step"]
    assert "I continue from the leader, candidate #1" in steps[0]["text"]
    assert [c["name"] for c in steps[0]["tool_calls"]] == [PROFILE]  # the first step measures nothing


def test_a_claude_fork_works_on_the_candidates_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeMessagesAPI([
        message(text("I read my working copy."), tool_use("toolu_1", READ_KERNEL, which="current"),
                stop_reason="tool_use"),
        message(text("That is all I do here."), stop_reason="end_turn"),
    ])
    serve_claude_from(api, monkeypatch)
    with running_app(tmp_path) as client:
        source = cpu_session(client, [submit("correct_5ms", "halve the overhead"),
                                      {"say": "I'm done.", "end_turn": True}], title="cpu source")
        wait_for(client, source["id"], lambda s: s["leader_number"] == 1, what="the source's leader")
        kernel = client.get(f"/api/sessions/{source['id']}/candidates/1").json()["source"]
        r = client.post(f"/api/sessions/{source['id']}/candidates/1/fork",
                        json={"agent": "claude", "agent_config": {"model": "claude-sonnet-5-5"}, "start": False})
        assert r.status_code == 201, r.text
        fid = r.json()["id"]
        # Stored with the fork, before any step: the working copy is the candidate's source.
        with client.app.state.engine.ctx.database.session() as db:  # type: ignore[attr-defined]
            s = db.get(SteeringSession, fid)
            assert s is not None
            state = RunnerState.load(s)
            draft = load_draft(SimpleNamespace(state=state, task=None), None)  # type: ignore[arg-type]
        assert (draft.source, draft.origin, draft.dirty) == (kernel, 1, False)
        assert client.post(f"/api/sessions/{fid}/start", json={"author": "test"}).status_code == 200
        wait_for(client, fid, lambda s: s["status"] == "paused", 60, "the end of Claude's turn")
        read = [e["payload"] for e in events(client, fid)
                if e["kind"] == "tool_result" and e["payload"]["name"] == READ_KERNEL]
    assert read and read[0]["text"] == f"(your working copy; from candidate #1)\n{kernel}"
    begin = user_blocks(api.requests[0])[0]["text"]
    assert "continues from candidate #1" in begin and f"session {source['id']} candidate #1" in begin


def names_in(html: str, form_id: str) -> dict[str, str]:
    """A form's fields: name -> the element that carries it (input or select)."""
    form = re.search(rf'<form[^>]*id="{form_id}".*?</form>', html, re.S)
    assert form is not None, form_id
    return {m.group(2): m.group(1) for m in re.finditer(r'<(input|select)[^>]*\bname="([^"]+)"', form.group(0))}


def test_the_fork_form_is_the_new_session_form_with_the_sources_settings(tmp_path: Path) -> None:
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator()) as client:
        source = family_source_session(client)
        new = names_in(client.get("/").text, "new-session")
        page = client.get(f"/sessions/{source['id']}/candidates/2/fork").text
        fork = names_in(page, "fork-form")
        assert {k: v for k, v in fork.items() if k != "start"} == new  # the same fields and widgets
        assert fork["focus"] == "select" and new["focus"] == "select"
        assert re.search(r'name="plateau_window"[^>]*placeholder="4 \(the script\'s default\)"[^>]*value=""', page)
        assert start_spec(BETTER.to_dict()) in page  # the setting the offline agent will start from
        # Posted: the offline agent with the candidate's setting as its start; an empty plateau
        # field is the default, as on the new-session form.
        r = client.post(f"/sessions/{source['id']}/candidates/2/fork", data={
            "title": "continue", "agent": "offline", "seed": "3", "focus": "memory", "plateau_window": "",
            "budget_steps": "5"}, follow_redirects=False)
        assert r.status_code == 303, r.text
        fid = int(r.headers["location"].rsplit("/", 1)[1])
        made = client.get(f"/api/sessions/{fid}").json()
    assert made["agent_config"] == {"seed": 3, "focus": "memory", "start": start_spec(BETTER.to_dict())}
    assert made["thresholds"]["plateau_window"] == 4 and made["status"] == "created"
    assert made["leader_number"] == 1 and made["budget"]["steps"] == 5
