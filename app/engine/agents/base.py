"""The agent interface. An agent is plain domain code: given feedback (the results of its
last tool calls and any steering delivered at this boundary) it returns its next step (what
it says and the tool calls it wants). The runner executes the tool calls, never the agent:
candidates go to the harness, steering is delivered at tool boundaries, and the goal is
checked on harness numbers only.

Backends (scripted.py, claude.py, offline.py, mcp_agent.py) implement `Agent` and import
only this module; app/engine/agents/registry.py maps names to
factories. Nothing here imports the runner: what an agent needs to know about the session
(problem, goal, baseline, scenarios, the contract text, the tools) arrives in its `Task`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

from question_bank.agent_tool import TOOL_NAME as CONSULT_BANK

# The names of the tools an agent may call: the agent's vocabulary. Each tool (name, schema,
# handler, what the agent reads back) is defined once, in app/engine/tools/; an agent gets the specs of
# the tools it is offered in `Task.tools`.
SUBMIT_CANDIDATE = "submit_candidate"
READ_CANDIDATE = "read_candidate"
LIST_CANDIDATES = "list_candidates"
DECLARE_DONE = "declare_done"
# The workspace tools of model-driven agents (Claude, MCP clients): one working copy of the kernel.
READ_KERNEL = "read_kernel"
WRITE_KERNEL = "write_kernel"
EDIT_KERNEL = "edit_kernel"
EVALUATE = "evaluate"
READ_FINDINGS = "read_findings"
__all__ = ["CONSULT_BANK"]  # the question bank's tool, named by question_bank/agent_tool.py
READ_BOARD = "read_board"  # a campaign's board: what the other agents concluded (app/engine/tools/board.py)
PROFILE = "profile"  # what bounds a candidate: its profile (app/engine/tools/profile.py)
READ_LESSONS = "read_lessons"  # what earlier sessions learned (app/engine/tools/lessons.py, lessons/)


@dataclass
class ToolCall:
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        return cls(name=d["name"], args=dict(d.get("args", {})), call_id=d.get("call_id", ""))


@dataclass
class ToolResult:
    call_id: str
    name: str
    ok: bool
    text: str  # what the agent reads
    data: dict[str, Any] = field(default_factory=dict)  # the same, structured

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolResult:
        return cls(**{k: d[k] for k in ("call_id", "name", "ok", "text") if k in d},
                   data=dict(d.get("data", {})))


@dataclass
class Usage:
    input_tokens: int = 0  # uncached input
    output_tokens: int = 0
    cost_usd: float = 0.0
    cache_read_tokens: int = 0  # input served from the prompt cache
    cache_write_tokens: int = 0  # input written to the prompt cache

    @property
    def tokens(self) -> int:
        """Every token the model read or wrote (what a token budget counts)."""
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens


@dataclass
class AgentStep:
    """One move of the agent. No tool calls means the agent ended its turn."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    # One record per model API call behind this step (model, stop reason, tokens, cost,
    # seconds); the runner stores each as a `model_call` event. Empty for agents without a model.
    model_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ends_turn(self) -> bool:
        return not self.tool_calls

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "tool_calls": [c.to_dict() for c in self.tool_calls],
                "usage": asdict(self.usage), "model_calls": list(self.model_calls)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AgentStep:
        return cls(text=d.get("text", ""),
                   tool_calls=[ToolCall.from_dict(c) for c in d.get("tool_calls", [])],
                   usage=Usage(**d.get("usage", {})), model_calls=list(d.get("model_calls", [])))


@dataclass
class SteeringMessage:
    """A person's message as the agent receives it."""

    intervention_id: int
    kind: str  # "question" | "information"
    mode: str  # "steer" | "queue"
    text: str
    author: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Feedback:
    """What the agent gets back before its next step."""

    results: list[ToolResult] = field(default_factory=list)
    messages: list[SteeringMessage] = field(default_factory=list)
    turn_ended: bool = False  # the last step ended the turn; queued messages arrive here

    def to_dict(self) -> dict[str, Any]:
        return {"results": [r.to_dict() for r in self.results],
                "messages": [m.to_dict() for m in self.messages], "turn_ended": self.turn_ended}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Feedback:
        return cls(results=[ToolResult.from_dict(r) for r in d.get("results", [])],
                   messages=[SteeringMessage(**m) for m in d.get("messages", [])],
                   turn_ended=bool(d.get("turn_ended", False)))


@dataclass
class Task:
    """What the agent is asked to do; built by the runner from the session."""

    problem: str
    candidate_kind: str  # "cuda" or "python-cpu"
    goal: str  # the stop condition, in words
    baseline_source: str
    visible_scenarios: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # specs of the tools offered (app/engine/tools/)
    # The offered tools that act on the session: an outside agent is shown waiting steering first.
    acting_tools: frozenset[str] = frozenset()
    session_id: int = 0  # the session the agent works for (0: none, e.g. in unit tests)
    contract: str = ""  # the text of the ABI every kernel implements (contract.h, or the python-cpu rule)
    # Lessons (lessons/), chosen once at the runner's start (app/domain/lessons.py: session_knowledge):
    knowledge: str = ""  # a model's prompt section: the lessons that fit, the lineage's failures
    priors: list[dict[str, Any]] = field(default_factory=list)  # knob lessons, for the offline agent
    # The session's leader when the agent starts (a fork's starting candidate, app/engine/fork.py):
    # number, title, source, speedup, visible_speedup, origin (where it came from). None: no leader.
    leader: dict[str, Any] | None = None


class Agent(ABC):
    """A strategy that proposes kernels. Implementations keep their own state and expose it
    through snapshot/restore, which the runner persists after every step so that a restarted
    server continues the same conversation."""

    name: str = "agent"
    # True for an agent whose step() only waits for an outside client (MCP): the runner may
    # cancel that wait at a pause and call step() again once the session resumes.
    waits_for_outside: bool = False

    def __init__(self, task: Task, config: dict[str, Any]) -> None:
        self.task = task
        self.config = config

    @abstractmethod
    async def step(self, feedback: Feedback) -> AgentStep:
        """The next step, given the feedback to the previous one (empty at the start)."""

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state to persist; restore() must accept it."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless agents need nothing)
        """Take back the state of a snapshot."""

    def tool_done(self, result: ToolResult) -> None:  # noqa: B027 (optional hook)
        """A tool call of the current step finished. Agents that answer an outside client
        (app/engine/agents/mcp_agent.py) hand the result over at once; others wait for step()."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release clients or processes the agent holds."""


class ToolError(Exception):
    """A tool call the server refuses; the agent reads the message as the tool's result."""


class AgentConfigError(ValueError):
    """The agent's configuration cannot work (unknown script, missing file, ...)."""
