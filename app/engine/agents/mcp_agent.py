"""The MCP agent: the session's agent is an outside client (Claude Code or any MCP client)
calling the workspace tools through the server's /mcp endpoint (app/faces/mcp.py).

Each tool call the client makes waits in the session's bridge until the runner asks this
agent for its next step; the runner executes it like any agent's call (steering, pauses and
the judge apply), and the result goes back to the client as soon as the tool is done. While
the session is paused the runner asks for no step, so the client's next call waits: a pause
blocks its next evaluation. Steering messages delivered at a tool boundary reach the client
inside its next tool result; if that call would act (evaluate, write, edit, declare done) it
is not run, so that the client reads the message first and decides again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from app.engine.agents.base import Agent, AgentStep, Feedback, SteeringMessage, Task, ToolCall, ToolResult, Usage


@dataclass
class McpReply:
    text: str
    ok: bool = True
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class PendingCall:
    call: ToolCall
    reply: asyncio.Future[McpReply]
    withdrawn: bool = False  # the client went away before the runner took the call


class McpBridge:
    """Between the clients of one session and its runner. Lives on the server's event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.calls: asyncio.Queue[PendingCall] = asyncio.Queue()
        self.inflight: PendingCall | None = None
        self.number = 0

    def submit(self, name: str, args: dict[str, Any]) -> PendingCall:
        self.number += 1
        pending = PendingCall(ToolCall(name, dict(args), f"mcp-{self.number}"), self.loop.create_future())
        self.calls.put_nowait(pending)
        return pending

    async def next_call(self) -> PendingCall:
        while True:
            pending = await self.calls.get()
            if not pending.withdrawn and not pending.reply.done():
                return pending

    @property
    def waiting(self) -> int:
        return self.calls.qsize()


_BRIDGES: dict[int, McpBridge] = {}


def bridge_for(session_id: int) -> McpBridge:
    """The session's bridge on the running loop (a bridge of a loop that ended is replaced)."""
    bridge = _BRIDGES.get(session_id)
    if bridge is None or bridge.loop is not asyncio.get_running_loop():
        bridge = _BRIDGES[session_id] = McpBridge()
    return bridge


def drop_bridge(session_id: int, reason: str) -> None:
    """Forget a session's bridge; clients still waiting get `reason` as an error."""
    bridge = _BRIDGES.pop(session_id, None)
    if bridge is None:
        return
    while not bridge.calls.empty():
        pending = bridge.calls.get_nowait()
        if not pending.reply.done():
            pending.reply.set_result(McpReply(reason, ok=False))
    if bridge.inflight is not None and not bridge.inflight.reply.done():
        bridge.inflight.reply.set_result(McpReply(reason, ok=False))


def drop_all_bridges(reason: str) -> None:
    for session_id in list(_BRIDGES):
        drop_bridge(session_id, reason)


def format_messages(messages: list[SteeringMessage]) -> str:
    return "\n".join(f"[{'A question' if m.kind == 'question' else 'Information'} from {m.author}] {m.text}"
                     for m in messages)


class McpAgent(Agent):
    name = "mcp"
    waits_for_outside = True

    def __init__(self, task: Task, config: dict[str, Any]) -> None:
        super().__init__(task, config)
        self.messages: list[SteeringMessage] = []  # delivered, not yet shown to the client
        self.calls = 0

    async def step(self, feedback: Feedback) -> AgentStep:
        bridge = bridge_for(self.task.session_id)
        for r in feedback.results:  # results tool_done could not hand over (after a restart)
            self._answer(bridge, r)
        self.messages.extend(feedback.messages)
        while True:
            pending = await bridge.next_call()
            if self.messages and pending.call.name in self.task.acting_tools:
                pending.reply.set_result(McpReply(
                    "Not run: a person steered you at this tool boundary. Read this first, then decide "
                    f"what to call:\n{format_messages(self.messages)}", ok=False,
                    data={"messages": [m.to_dict() for m in self.messages]}))
                self.messages = []
                continue
            bridge.inflight = pending
            self.calls += 1
            words = str(pending.call.args.get("notes") or "")  # the client's own words about its change
            return AgentStep(words, [pending.call], Usage())

    def tool_done(self, result: ToolResult) -> None:
        self._answer(bridge_for(self.task.session_id), result)

    def _answer(self, bridge: McpBridge, result: ToolResult) -> None:
        pending = bridge.inflight
        if pending is None or pending.call.call_id != result.call_id or pending.reply.done():
            return
        text = result.text
        if self.messages:
            text += f"\n\nMessages for you:\n{format_messages(self.messages)}"
            self.messages = []
        pending.reply.set_result(McpReply(text, result.ok, result.data))
        bridge.inflight = None

    async def close(self) -> None:
        # A stopped session: clients waiting on it get an answer instead of waiting forever.
        drop_bridge(self.task.session_id, "the session's runner stopped; check the session's status")

    def snapshot(self) -> dict[str, Any]:
        return {"messages": [m.to_dict() for m in self.messages], "calls": self.calls}

    def restore(self, state: dict[str, Any]) -> None:
        self.messages = [SteeringMessage(**m) for m in state.get("messages", [])]
        self.calls = int(state.get("calls", 0))
