"""The Claude agent through the real anthropic SDK, its HTTP answered by a mock transport with
bodies in the Messages API's schema: the tool loop, every stop reason, retries, caching,
trimming and accounting; then a whole session through the real runner on the CPU backend."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from app.domain.steering.triggers import Thresholds, check_declared_limit
from app.engine.agents.base import EVALUATE, WRITE_KERNEL, AgentConfigError, Feedback, SteeringMessage, Task, ToolResult
from app.engine.agents.claude import ClaudeAgent, ClaudeConfig, price_of
from app.engine.tools.table import WORKSPACE_TOOL_NAMES, WORKSPACE_TOOL_SPECS
from app.services.evaluation import CPU_SCENARIOS
from app.store.models import DECLARED_LIMIT, LEADER, PAUSED
from tests.claude_fake import FakeMessagesAPI, error, message, serve_claude_from, text, tool_use, user_blocks
from tests.server_support import CPU, events, running_app, wait_for, wait_status

TASK = Task("attention-forward", "python-cpu", "geomean vs baseline >= 10 on all scenarios",
            f"{CPU}:correct_10ms", [s.to_dict() for s in CPU_SCENARIOS if not s.hidden],
            tools=WORKSPACE_TOOL_SPECS)


def agent_with(api: FakeMessagesAPI, max_retries: int = 2, **config: Any) -> ClaudeAgent:
    return ClaudeAgent(TASK, config, client=api.client(max_retries))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_tool_use_reply_becomes_tool_calls_with_usage_and_cost_per_api_call() -> None:
    api = FakeMessagesAPI([message(text("I start by reading it."), tool_use("toolu_1", "read_kernel", which="current"),
                                   stop_reason="tool_use", input_tokens=1000, output_tokens=100, cache_write=3000)])
    agent = agent_with(api)
    step = run(agent.step(Feedback()))
    assert step.text == "I start by reading it."
    assert [(c.name, c.args, c.call_id) for c in step.tool_calls] == [("read_kernel", {"which": "current"}, "toolu_1")]
    assert (step.usage.input_tokens, step.usage.output_tokens, step.usage.cache_write_tokens) == (1000, 100, 3000)
    # claude-sonnet-5-5: $2 in, $10 out, cache write 1.25x input
    assert step.usage.cost_usd == pytest.approx((1000 * 2 + 100 * 10 + 3000 * 2.5) / 1e6)
    [call] = step.model_calls
    assert call["stop_reason"] == "tool_use" and call["cache_write_tokens"] == 3000 and call["request_id"] == "req_1"


def test_the_stable_prefix_and_the_conversation_carry_cache_breakpoints() -> None:
    api = FakeMessagesAPI([message(tool_use("toolu_1", "read_kernel"), stop_reason="tool_use")])
    run(agent_with(api).step(Feedback()))
    [req] = api.requests
    assert req["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert req["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sum("cache_control" in t for t in req["tools"]) == 1
    assert {t["name"] for t in req["tools"]} == WORKSPACE_TOOL_NAMES
    assert req["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "geomean vs baseline >= 10" in req["system"][0]["text"]
    assert "cpu-causal-d64" in req["system"][0]["text"]  # visible scenarios are listed
    assert "cpu-chunk-hidden" not in req["system"][0]["text"]  # hidden ones never are


def test_tool_results_come_first_and_a_steering_message_follows_them() -> None:
    api = FakeMessagesAPI([
        message(tool_use("toolu_1", "evaluate", title="first"), stop_reason="tool_use"),
        message(text("Noted."), tool_use("toolu_2", "read_findings"), stop_reason="tool_use"),
    ])
    agent = agent_with(api)
    run(agent.step(Feedback()))
    fb = Feedback(results=[ToolResult("toolu_1", "evaluate", True, "Candidate #1: leader - 2.0x")],
                  messages=[SteeringMessage(7, "question", "steer", "Which layer have you not touched?", "ana")])
    run(agent.step(fb))
    blocks = user_blocks(api.requests[1])
    assert blocks[0]["type"] == "tool_result" and blocks[0]["tool_use_id"] == "toolu_1"
    assert "Candidate #1: leader" in blocks[0]["content"]
    assert blocks[1]["type"] == "text" and "Which layer have you not touched?" in blocks[1]["text"]
    assert "A question from ana" in blocks[1]["text"]


def test_a_failed_tool_is_an_error_result_and_a_missing_one_is_reported_not_executed() -> None:
    api = FakeMessagesAPI([
        message(tool_use("a", "edit_kernel", old="x", new="y"), tool_use("b", "evaluate"), stop_reason="tool_use"),
        message(text("ok"), stop_reason="end_turn"),
    ])
    agent = agent_with(api)
    run(agent.step(Feedback()))
    run(agent.step(Feedback(results=[ToolResult("a", "edit_kernel", False, "'old' does not occur")])))
    a, b = user_blocks(api.requests[1])
    assert a["is_error"] is True and "does not occur" in a["content"]
    assert b["tool_use_id"] == "b" and b["is_error"] is True and "not executed" in b["content"]


def test_max_tokens_discards_the_cut_tool_call_and_asks_to_continue_within_the_same_step() -> None:
    api = FakeMessagesAPI([
        message(text("Here is the whole kernel:"), tool_use("cut", "write_kernel", source="#include"),
                stop_reason="max_tokens"),
        message(tool_use("toolu_2", "edit_kernel", old="a", new="b"), stop_reason="tool_use"),
    ])
    agent = agent_with(api)
    step = run(agent.step(Feedback()))
    assert [c.call_id for c in step.tool_calls] == ["toolu_2"]
    assert [c["stop_reason"] for c in step.model_calls] == ["max_tokens", "tool_use"]
    second = api.requests[1]["messages"]
    assert all(b["type"] != "tool_use" for b in second[-2]["content"])  # the cut call is gone
    assert "output limit" in second[-1]["content"][0]["text"]


def test_pause_turn_sends_the_paused_turn_back_to_continue_it() -> None:
    api = FakeMessagesAPI([
        message(text("Thinking about tiles..."), stop_reason="pause_turn"),
        message(tool_use("toolu_1", "read_kernel"), stop_reason="tool_use"),
    ])
    step = run(agent_with(api).step(Feedback()))
    assert len(step.tool_calls) == 1 and len(step.model_calls) == 2
    assert api.requests[1]["messages"][-1] == {
        "role": "assistant", "content": [{"type": "text", "text": "Thinking about tiles...",
                                          "cache_control": {"type": "ephemeral"}}]}


def test_end_turn_refusal_and_stop_sequence_end_the_turn_without_tool_calls() -> None:
    for reason in ("end_turn", "stop_sequence", "refusal"):
        api = FakeMessagesAPI([message(text("I have nothing more to try."), stop_reason=reason)])
        step = run(agent_with(api).step(Feedback()))
        assert step.ends_turn and "nothing more to try" in step.text
        assert ("declined" in step.text) == (reason == "refusal")


def test_the_agents_declared_limit_words_are_in_its_step_text_for_the_trigger() -> None:
    api = FakeMessagesAPI([message(text("This is the limit of the hardware."), stop_reason="end_turn")])
    step = run(agent_with(api).step(Feedback()))
    hit = check_declared_limit(step.text, Thresholds())
    assert hit is not None and hit.kind == DECLARED_LIMIT


def test_context_window_exceeded_trims_old_results_and_continues() -> None:
    api = FakeMessagesAPI([message(tool_use(f"t{i}", "read_kernel"), stop_reason="tool_use") for i in range(4)])
    api.replies.append(message(text("partial"), stop_reason="model_context_window_exceeded"))
    api.replies.append(message(tool_use("t9", "evaluate"), stop_reason="tool_use"))
    agent = agent_with(api)
    run(agent.step(Feedback()))
    for i in range(4):
        step = run(agent.step(Feedback(results=[ToolResult(f"t{i}", "read_kernel", True, "line\n" * 200)])))
    assert step.tool_calls[0].call_id == "t9"
    results = [b for m in api.requests[-1]["messages"] if m["role"] == "user" for b in m["content"]
               if b["type"] == "tool_result"]
    assert [r["content"].startswith("[trimmed") for r in results] == [True, True, False, False]
    assert "context window filled up" in api.requests[-1]["messages"][-1]["content"][0]["text"]


def test_old_tool_results_are_trimmed_once_the_context_grows_past_the_threshold() -> None:
    big = 5_000
    api = FakeMessagesAPI([message(tool_use(f"t{i}", "read_kernel"), stop_reason="tool_use", input_tokens=big)
                           for i in range(5)])
    agent = agent_with(api, trim_at_tokens=4_000, keep_recent=2)
    run(agent.step(Feedback()))
    for i in range(4):
        run(agent.step(Feedback(results=[ToolResult(f"t{i}", "read_kernel", True, "x" * 2000)])))
    results = [b for m in api.requests[-1]["messages"] if m["role"] == "user" for b in m["content"]
               if b["type"] == "tool_result"]
    assert [r["content"].startswith("[trimmed") for r in results] == [True, True, False, False]
    assert agent.trimmed >= 2


def test_overloaded_api_is_retried_by_the_sdk_then_answers() -> None:
    api = FakeMessagesAPI([error(529, "overloaded_error", "Overloaded"),
                           message(tool_use("toolu_1", "read_kernel"), stop_reason="tool_use")])
    step = run(agent_with(api, max_retries=2).step(Feedback()))
    assert len(api.requests) == 2 and len(step.tool_calls) == 1 and len(step.model_calls) == 1


def test_an_api_that_stays_unavailable_ends_the_step_and_the_results_go_out_with_the_next() -> None:
    api = FakeMessagesAPI([message(tool_use("toolu_1", "evaluate"), stop_reason="tool_use"),
                           error(500, "api_error", "Internal server error"),
                           message(tool_use("toolu_2", "read_findings"), stop_reason="tool_use")])
    agent = agent_with(api, max_retries=0)
    run(agent.step(Feedback()))
    down = run(agent.step(Feedback(results=[ToolResult("toolu_1", "evaluate", True, "Candidate #1: leader")])))
    assert down.ends_turn and "did not answer" in down.text and down.model_calls == []
    up = run(agent.step(Feedback(turn_ended=True, messages=[
        SteeringMessage(1, "question", "steer", "What bounds it?", "bo")])))
    assert up.tool_calls[0].call_id == "toolu_2"
    blocks = user_blocks(api.requests[2])
    assert [b["type"] for b in blocks] == ["tool_result", "text"]  # one result, not two
    assert api.requests[2]["messages"][-2]["role"] == "assistant"


def test_a_bad_key_or_model_is_a_configuration_error() -> None:
    for status, kind in ((401, "authentication_error"), (404, "not_found_error")):
        api = FakeMessagesAPI([error(status, kind, "no")])
        with pytest.raises(AgentConfigError, match=str(status)):
            run(agent_with(api).step(Feedback()))


def test_retries_and_timeouts_are_set_explicitly_on_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    agent = ClaudeAgent(TASK, {"timeout_s": 120, "max_retries": 3})
    client = agent.client
    assert client.max_retries == 3
    assert client.timeout.read == 120 and client.timeout.connect == 10  # type: ignore[union-attr]
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(AgentConfigError, match="ANTHROPIC_API_KEY"):
        _ = ClaudeAgent(TASK, {}).client


def test_configuration_is_validated_and_prices_follow_the_model_family() -> None:
    with pytest.raises(AgentConfigError, match="unknown claude option"):
        ClaudeConfig.parse({"temperature": 1})
    with pytest.raises(AgentConfigError, match="max_tokens"):
        ClaudeConfig.parse({"max_tokens": 10})
    assert price_of("claude-opus-4-1-20250805").input == 15.0
    assert price_of("claude-opus-4-5").input == 5.0
    assert price_of("claude-haiku-4-5").output == 5.0
    assert price_of("some-model", {"input": 1, "output": 2}).cache_read == pytest.approx(0.1)


def test_a_snapshot_restores_the_conversation_after_a_restart() -> None:
    api = FakeMessagesAPI([message(tool_use("toolu_1", "read_kernel"), stop_reason="tool_use"),
                           message(text("done reading"), stop_reason="end_turn")])
    first = agent_with(api)
    run(first.step(Feedback()))
    second = agent_with(api)
    second.restore(first.snapshot())
    run(second.step(Feedback(results=[ToolResult("toolu_1", "read_kernel", True, "src")])))
    assert len(api.requests[1]["messages"]) == 3 and second.calls == 2


# -- a whole session through the real runner --------------------------------------------------


def test_claude_session_writes_evaluates_is_steered_at_a_tool_boundary_declares_done_and_pauses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    question = "Which part of the time have you not attacked yet: the waits themselves?"
    message_sent = threading.Event()

    async def after_message_is_sent(body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.to_thread(message_sent.wait, 60)
        return message(tool_use("toolu_3", "read_findings"), stop_reason="tool_use", cache_read=3000)

    api = FakeMessagesAPI([
        message(text("I start from a port with half the overhead."),
                tool_use("toolu_1", WRITE_KERNEL, source=f"{CPU}:correct_5ms"),
                stop_reason="tool_use", input_tokens=1500, cache_write=3000),
        message(tool_use("toolu_2", EVALUATE, title="halve the overhead"), stop_reason="tool_use", cache_read=3000),
        after_message_is_sent,
        message(text("Good question: the waits can overlap."),
                tool_use("toolu_4", WRITE_KERNEL, source=f"{CPU}:correct_2ms"),
                tool_use("toolu_5", EVALUATE, title="overlap the waits"), stop_reason="tool_use", cache_read=3500),
        message(tool_use("toolu_6", "declare_done", reason="Nothing is left to overlap."),
                stop_reason="tool_use", cache_read=4000),
    ])
    serve_claude_from(api, monkeypatch)

    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={
            "title": "claude on the CPU", "agent": "claude", "agent_config": {"model": "claude-sonnet-5-5"},
            "candidate_kind": "python-cpu", "baseline": f"{CPU}:correct_10ms", "budget": {"cost_usd": 5},
        })
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        wait_for(client, sid, lambda s: s["leader_number"] == 1, what="the first leader")
        r = client.post(f"/api/sessions/{sid}/interventions", json={"text": question, "author": "ana"})
        assert r.status_code == 201, r.text
        message_sent.set()
        state = wait_status(client, sid, PAUSED, timeout=120)
        trigger = client.get(f"/api/sessions/{sid}/triggers").json()[-1]
        cands = client.get(f"/api/sessions/{sid}/candidates").json()
        evs = events(client, sid)

    assert trigger["kind"] == DECLARED_LIMIT and trigger["evidence"]["source"] == "declare_done tool call"
    assert [(c["number"], c["verdict"]) for c in cands] == [(1, LEADER), (2, LEADER)]
    assert state["leader_number"] == 2 and state["leader_speedup"] > 2.5
    # The question reached Claude once, as text beside tool results, at a tool boundary.
    carrying = [req for req in api.requests if any(question in b.get("text", "") for b in user_blocks(req))]
    assert len(carrying) == 1
    blocks = user_blocks(carrying[0])
    assert blocks[0]["type"] == "tool_result" and blocks[-1]["type"] == "text"
    evaluated = next(b for req in api.requests for b in user_blocks(req) if b.get("tool_use_id") == "toolu_2")
    assert "geomean" in evaluated["content"] and "Candidate #1: leader" in evaluated["content"]
    # Every API call is an event with its tokens and cost; the session's use adds them up.
    calls = [e["payload"] for e in evs if e["kind"] == "model_call"]
    assert len(calls) == 5 and calls[0]["cache_write_tokens"] == 3000 and calls[1]["cache_read_tokens"] == 3000
    assert all(c["cost_usd"] > 0 and c["model"] == "claude-sonnet-5-5" for c in calls)
    assert state["used"]["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls), rel=1e-3)
    assert state["used"]["tokens"] == sum(c["input_tokens"] + c["output_tokens"] + c["cache_read_tokens"]
                                          + c["cache_write_tokens"] for c in calls)
    kinds = [e["kind"] for e in evs]
    assert kinds.index("delivered") < len(kinds) - 1 - kinds[::-1].index("evaluation")


@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="live smoke test: needs ANTHROPIC_API_KEY")
def test_live_claude_answers_one_step_with_usage() -> None:
    model = os.environ.get("SOCRATIC_SMOKE_MODEL", "claude-haiku-4-5")
    agent = ClaudeAgent(TASK, {"model": model, "max_tokens": 1024, "max_retries": 2, "timeout_s": 120})

    async def one_step() -> Any:
        try:
            return await agent.step(Feedback())
        finally:
            await agent.close()

    step = run(one_step())
    assert step.model_calls and step.usage.input_tokens + step.usage.cache_write_tokens > 0
    assert step.usage.cost_usd > 0
    assert all(c.name in WORKSPACE_TOOL_NAMES for c in step.tool_calls)
