"""An outside agent drives a session through /mcp: the real `mcp` client against the real
server (`socratic serve`, uvicorn on 127.0.0.1), CPU stand-in kernels evaluated by the
harness. A pause blocks the client's next evaluation; the person's question reaches it
inside a tool result; declaring done pauses the session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.engine.tools.table import WORKSPACE_TOOL_NAMES
from app.faces.mcp import session_of_token, session_token
from tests.server_support import CPU, live_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(tmp_path, "--allow-python-candidates", env={"SOCRATIC_GPU_POLL_S": "1"}) as base:
        yield base


def new_session(base: str, agent: str = "mcp", **fields: Any) -> dict[str, Any]:
    # a 30 ms baseline, then 10 ms and 5 ms candidates: on two busy cores a thread waits a few ms for
    # a core after each sleep, which made 5 ms and 2 ms candidates read alike (1.48x and 1.49x over
    # 10 ms); each gain stays under the suspicious-jump pause (3x the leader)
    body = {"title": f"{agent} session", "agent": agent, "candidate_kind": "python-cpu",
            "baseline": f"{CPU}:correct_30ms", "thresholds": {"plateau_window": 20}, **fields}
    if agent == "scripted":
        body["agent_config"] = {"steps": [{"say": "waiting"}]}
    r = httpx.post(f"{base}/api/sessions", json=body, timeout=30)
    assert r.status_code == 201, r.text
    return dict(r.json())


def access(base: str, session_id: int) -> dict[str, Any]:
    r = httpx.get(f"{base}/api/sessions/{session_id}/mcp", timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def connect(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(180, connect=10))
    return Client(streamable_http_client(url, http_client=http))


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def test_tokens_name_one_session_and_cannot_be_forged() -> None:
    secret = b"k" * 32
    token = session_token(secret, 7)
    assert session_of_token(secret, token) == 7
    assert session_of_token(secret, token.replace("-7-", "-8-")) is None
    assert session_of_token(b"other", token) is None
    assert session_of_token(secret, "sk-socratic-7-" + "0" * 40) is None


def test_an_mcp_client_is_refused_without_the_session_token(server: str) -> None:
    sid = new_session(server)["id"]
    info = access(server, sid)
    assert info["accepts_calls"] and info["url"].endswith("/mcp") and info["token"] in info["claude_code"]
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {info['token']}x"}):
        r = httpx.post(info["url"], json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"Accept": "application/json, text/event-stream", **headers}, timeout=10)
        assert r.status_code == 401, r.text


def test_an_outside_agent_writes_evaluates_is_paused_steered_and_declares_done_through_mcp(server: str) -> None:
    session = new_session(server)
    sid = session["id"]
    info = access(server, sid)
    question = "Which part of the time have you not attacked yet: the waits themselves?"

    async def drive() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connect(info["url"], info["token"]) as client:
            tools = await client.list_tools()
            seen["tools"] = {t.name for t in tools.tools}
            seen["read"] = text_of(await client.call_tool("read_kernel", {"which": "current"}))
            await client.call_tool("write_kernel", {"source": f"{CPU}:correct_10ms"})
            seen["first"] = text_of(await client.call_tool("evaluate", {"title": "halve the overhead"}))
            r = await asyncio.to_thread(httpx.post, f"{server}/api/sessions/{sid}/pause",
                                        json={"author": "ana", "reason": "let me look"}, timeout=10)
            assert r.status_code == 200, r.text
            blocked = asyncio.create_task(client.call_tool("evaluate", {"title": "same again"}))
            # A negative: the call must not return while the session is paused (a window, not a wait).
            done, _ = await asyncio.wait({blocked}, timeout=3)
            seen["blocked_while_paused"] = not done
            r = await asyncio.to_thread(httpx.post, f"{server}/api/sessions/{sid}/interventions",
                                        json={"text": question, "author": "ana"}, timeout=10)
            assert r.status_code == 201, r.text
            steered = await asyncio.wait_for(blocked, timeout=60)
            seen["steered"], seen["steered_error"] = text_of(steered), steered.is_error
            await client.call_tool("edit_kernel", {"old": "correct_10ms", "new": "correct_5ms"})
            seen["second"] = text_of(await client.call_tool("evaluate", {"title": "overlap the waits"}))
            seen["findings"] = text_of(await client.call_tool("read_findings", {}))
            seen["done"] = text_of(await client.call_tool("declare_done", {"reason": "nothing left to overlap"}))
        return seen

    seen = asyncio.run(drive())
    assert seen["tools"] == WORKSPACE_TOOL_NAMES
    assert "correct_30ms" in seen["read"]
    assert "Candidate #1: leader" in seen["first"] and "geomean" in seen["first"]
    assert seen["blocked_while_paused"]
    assert seen["steered_error"] and "Not run" in seen["steered"] and question in seen["steered"]
    assert "Candidate #2: leader" in seen["second"]
    assert question in seen["findings"]
    state = httpx.get(f"{server}/api/sessions/{sid}", timeout=10).json()
    assert state["status"] == "paused" and state["leader_number"] == 2
    trigger = httpx.get(f"{server}/api/sessions/{sid}/triggers", timeout=10).json()[-1]
    assert trigger["kind"] == "declared_limit" and trigger["evidence"]["words"] == "nothing left to overlap"
    cands = httpx.get(f"{server}/api/sessions/{sid}/candidates", timeout=10).json()
    assert [c["author"] for c in cands] == ["mcp", "mcp"]  # the blocked call was not run


def test_a_session_of_another_agent_takes_no_mcp_calls(server: str) -> None:
    sid = new_session(server, agent="scripted", start=False)["id"]
    info = access(server, sid)
    assert not info["accepts_calls"]

    async def call() -> Any:
        async with connect(info["url"], info["token"]) as client:
            return await client.call_tool("read_kernel", {})

    result = asyncio.run(call())
    assert result.is_error and "only an 'mcp' session" in text_of(result)
