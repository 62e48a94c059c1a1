"""The one table of agent tools, and the dispatch every agent's calls go through."""

from __future__ import annotations

from app.engine.agents.base import (
    DECLARE_DONE,
    LIST_CANDIDATES,
    PROFILE,
    READ_CANDIDATE,
    READ_LESSONS,
    ToolCall,
    ToolError,
    ToolResult,
)
from app.engine.tools import board, candidates, lessons, profile, workspace
from app.engine.tools.base import Tool, ToolContext, refused

TOOLS: dict[str, Tool] = {t.name: t for t in (*candidates.TOOLS, *workspace.TOOLS, *board.TOOLS, *profile.TOOLS,
                                                *lessons.TOOLS)}

# What a model-driven agent (Claude, an MCP client) is offered, in the order it reads them.
WORKSPACE_TOOLS: list[Tool] = [TOOLS[name] for name in (
    workspace.READ_KERNEL, workspace.WRITE_KERNEL, workspace.EDIT_KERNEL, workspace.EVALUATE,
    LIST_CANDIDATES, READ_CANDIDATE, workspace.READ_FINDINGS, PROFILE, workspace.CONSULT_BANK, READ_LESSONS,
    board.READ_BOARD,
    DECLARE_DONE,
)]
WORKSPACE_TOOL_SPECS = [t.spec() for t in WORKSPACE_TOOLS]
WORKSPACE_TOOL_NAMES = frozenset(t.name for t in WORKSPACE_TOOLS)
# Calls that change the session: steering that is waiting is shown to an outside agent before them.
ACTING_TOOLS = frozenset(t.name for t in TOOLS.values() if t.acting)


async def dispatch(call: ToolCall, ctx: ToolContext) -> ToolResult:
    """Run one tool call. A refused call (unknown tool, bad arguments) is a result the agent
    reads, never an exception; the pipeline's Stopped and cancellation pass through."""
    tool = TOOLS.get(call.name)
    if tool is None:
        return refused(call, f"unknown tool {call.name!r}")
    try:
        return await tool.handler(call, ctx)
    except ToolError as exc:
        return refused(call, str(exc))
