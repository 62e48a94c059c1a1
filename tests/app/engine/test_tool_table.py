"""The agent tools' one table (app/engine/tools/): every tool is one row whose handler receives a
ToolContext, never the runner; an `evaluate` call walks down the table, the handler and the
candidate pipeline to the harness without the runner module even being imported; and a
server restarted in the middle of an `evaluate` call resumes it without a second candidate."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from app.engine.agents.base import EVALUATE, WRITE_KERNEL, ToolCall
from app.engine.tools.base import ToolContext
from app.engine.tools.table import TOOLS, WORKSPACE_TOOL_NAMES, WORKSPACE_TOOLS
from app.settings import PROJECT_ROOT
from app.store.models import DECLARED_LIMIT, INTERRUPTED, LEADER, PAUSED
from tests.claude_fake import FakeMessagesAPI, message, serve_claude_from, tool_use
from tests.server_support import CPU, events, running_app, wait_for, wait_status

ROOT = PROJECT_ROOT


def test_every_tool_is_one_row_whose_handler_takes_the_call_and_a_context_without_the_runner() -> None:
    assert set(TOOLS) >= WORKSPACE_TOOL_NAMES | {"submit_candidate"}
    assert [t.name for t in WORKSPACE_TOOLS] == [s for s in (t.spec()["name"] for t in WORKSPACE_TOOLS)]
    for tool in TOOLS.values():
        assert tool.input_schema["type"] == "object" and tool.description, tool.name
        params = inspect.signature(tool.handler).parameters
        assert list(params) == ["call", "ctx"], tool.name
        hints = typing.get_type_hints(tool.handler)
        assert hints["call"] is ToolCall and hints["ctx"] is ToolContext, tool.name
    from app.engine.pipeline import CandidatePipeline
    from app.engine.runner_state import RunnerState
    from app.services.context import ServerContext

    hints = typing.get_type_hints(ToolContext, localns={
        "ServerContext": ServerContext, "CandidatePipeline": CandidatePipeline, "RunnerState": RunnerState})
    assert set(hints) == {"session_id", "services", "state", "cancel", "task", "pipeline"}
    assert hints["services"] is ServerContext and hints["pipeline"] is CandidatePipeline
    assert not any("SessionRunner" in repr(h) or "RunnerManager" in repr(h) for h in hints.values())


# Run in a fresh interpreter, so that sys.modules shows what the call imported.
WALK = r"""
import asyncio, json, sys, threading
from pathlib import Path

from app.engine.agents.base import EVALUATE, WRITE_KERNEL, Task, ToolCall
from app.services.context import ServerContext
from app.store.database import open_database
from app.engine.new_session import open_session
from app.services.devices import DeviceQueue
from app.engine.pipeline import CandidatePipeline
from app.engine.runner_state import RunnerState
from app.domain.schemas import SessionCreate
from app.domain.sessions import candidates_of, get_session
from app.settings import Settings
from app.engine.tools.base import ToolContext
from app.engine.tools.table import dispatch
from app.store.events import events_after

settings = Settings(data_dir=Path(sys.argv[1]), allow_python_candidates=True)

async def main():
    database = open_database(settings)
    ctx = ServerContext(settings, database, devices=DeviceQueue(gpu_probe=lambda: False))
    ctx.hub.bind_loop(asyncio.get_running_loop())
    spec = SessionCreate(title="walk", agent="scripted", agent_config={"steps": []}, candidate_kind="python-cpu",
                         baseline="tests.cpu_kernels:correct_10ms")
    with ctx.unit() as u:
        sid = open_session(u, spec, settings).id
    with ctx.unit() as u:
        state = RunnerState.load(get_session(u.db, sid))
    cancel = threading.Event()
    task = Task("attention-forward", "python-cpu", "", "tests.cpu_kernels:correct_10ms", [], contract="rule")
    tools = ToolContext(sid, ctx, state, cancel, task, CandidatePipeline(ctx, sid, state, cancel))
    wrote = await dispatch(ToolCall(WRITE_KERNEL, {"source": "tests.cpu_kernels:correct_5ms"}, "c1"), tools)
    result = await dispatch(ToolCall(EVALUATE, {"title": "halved"}, "c2"), tools)
    with database.session() as db:
        cands = [(c.number, c.verdict, c.source) for c in candidates_of(db, sid)]
        kinds = [e.kind for e in events_after(db, sid, 0)]
        saved = get_session(db, sid).runner_state
    print(json.dumps({"wrote": wrote.ok, "ok": result.ok, "text": result.text, "data": result.data,
                      "candidates": cands, "kinds": kinds, "state": saved,
                      "modules": sorted(m for m in sys.modules if m.startswith(("app.", "harness.")))}))
    database.dispose()

asyncio.run(main())
"""


def test_an_evaluate_call_walks_down_the_table_handler_pipeline_and_harness_never_touching_the_runner(
        tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", WALK, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    walk = json.loads(out.stdout.strip().splitlines()[-1])
    assert walk["wrote"] and walk["ok"], walk["text"]
    assert walk["candidates"] == [[1, LEADER, "tests.cpu_kernels:correct_5ms"]]
    assert walk["data"]["verdict"] == LEADER and "Candidate #1: leader" in walk["text"]
    for kind in ("candidate", "evaluation_started", "evaluation", "verdict", "leader"):
        assert kind in walk["kinds"], kind
    # The state the pipeline and the workspace saved: the call's candidate, the evaluated draft.
    assert walk["state"]["call_candidates"] == {"c2": 1}
    assert walk["state"]["workspace"] == {"source": "tests.cpu_kernels:correct_5ms", "origin": 1, "dirty": False}
    modules = set(walk["modules"])
    assert {"app.engine.tools.table", "app.engine.pipeline", "harness.evaluate", "harness.executor"} <= modules
    assert not modules & {"app.engine.runner.session_runner", "app.engine.runner.manager", "app.faces.web.app"}, modules


@pytest.mark.timeout(400)
def test_a_restart_in_the_middle_of_an_evaluate_call_resumes_it_without_a_second_candidate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeMessagesAPI([
        message(tool_use("toolu_1", WRITE_KERNEL, source=f"{CPU}:correct_5ms"),
                tool_use("toolu_2", EVALUATE, title="half the overhead"), stop_reason="tool_use"),
        message(tool_use("toolu_3", "declare_done", reason="Nothing left to try."), stop_reason="tool_use"),
    ])
    serve_claude_from(api, monkeypatch)

    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={
            "title": "restart mid-call", "agent": "claude", "candidate_kind": "python-cpu",
            "baseline": f"{CPU}:correct_10ms"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        wait_for(client, sid, lambda s: s["detail"].startswith("evaluating candidate #1"), what="the evaluation")
    # The server went away while the harness evaluated candidate #1 of call toolu_2.

    with running_app(tmp_path) as client:
        assert client.get(f"/api/sessions/{sid}").json()["status"] == INTERRUPTED
        assert client.post(f"/sessions/{sid}/resume", follow_redirects=False).status_code == 303
        state = wait_status(client, sid, PAUSED, timeout=180)
        cands = client.get(f"/api/sessions/{sid}/candidates").json()
        trigger = client.get(f"/api/sessions/{sid}/triggers").json()[-1]
        evs = events(client, sid)

    assert [(c["number"], c["status"], c["verdict"]) for c in cands] == [(1, "evaluated", LEADER)]
    assert [e["payload"]["number"] for e in evs if e["kind"] == "candidate"] == [1]
    assert [e["payload"]["number"] for e in evs if e["kind"] == "verdict"] == [1]
    results = [e["payload"] for e in evs if e["kind"] == "tool_result"]
    assert [(r["call_id"], r["ok"]) for r in results] == [("toolu_1", True), ("toolu_2", True), ("toolu_3", True)]
    assert trigger["kind"] == DECLARED_LIMIT and state["leader_number"] == 1
    assert len(api.requests) == 2  # the step in flight was continued, not asked for again
