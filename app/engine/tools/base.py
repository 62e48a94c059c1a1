"""One row of the tool table, and what its handler receives."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.engine.agents.base import Task, ToolCall, ToolResult

if TYPE_CHECKING:
    from app.engine.pipeline import CandidatePipeline
    from app.engine.runner_state import RunnerState
    from app.services.context import ServerContext


@dataclass(frozen=True)
class ToolContext:
    """Everything a handler may use, and nothing more: no runner."""

    session_id: int
    services: ServerContext  # settings, database (`unit()`), event hub, device queue
    state: RunnerState  # the session's persisted runner state (the working copy lives there)
    cancel: threading.Event  # set when the session stops: the evaluation in flight is killed
    task: Task  # what the agent was told: baseline source, contract text
    pipeline: CandidatePipeline  # store -> compile -> queue -> harness -> judge -> verdict -> goal


Handler = Callable[[ToolCall, ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Tool:
    """A tool an agent may call: its name and schema as the model sees them, the handler that
    runs it, and whether it acts on the session (an outside agent is shown waiting steering
    before such a call: app/engine/agents/mcp_agent.py)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    acting: bool = False

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def ok(call: ToolCall, text: str, data: dict[str, Any] | None = None) -> ToolResult:
    return ToolResult(call.call_id, call.name, True, text, data or {})


def refused(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call.call_id, call.name, False, message)
