"""Agent backends by name: scripted (tests, demos), claude (the anthropic SDK), offline (a
search over the kernel family, no model) and mcp (an outside client through /mcp). The
session form and the API list what is registered; what a new session gets when it names none
is the settings' `default_agent` (claude with an API key, the offline agent without)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.engine.agents.base import Agent, AgentConfigError, Task
from app.engine.agents.scripted import ScriptedAgent

AgentFactory = Callable[[Task, dict[str, Any]], Agent]
ConfigCheck = Callable[[dict[str, Any]], None]  # raises AgentConfigError


@dataclass(frozen=True)
class AgentInfo:
    name: str
    description: str
    factory: AgentFactory
    validate: ConfigCheck | None = None  # checks agent_config when a session is created
    candidate_kind: str | None = None  # the only kind of candidate it can write, if it has one
    # Why it cannot start on this server (a missing API key), or None: checked cheaply, no network.
    unavailable: Callable[[], str | None] | None = None

    def why_unavailable(self) -> str | None:
        return self.unavailable() if self.unavailable is not None else None


_AGENTS: dict[str, AgentInfo] = {}


def register_agent(name: str, factory: AgentFactory, description: str, validate: ConfigCheck | None = None,
                   candidate_kind: str | None = None, unavailable: Callable[[], str | None] | None = None) -> None:
    _AGENTS[name] = AgentInfo(name, description, factory, validate, candidate_kind, unavailable)


def agent_info(name: str) -> AgentInfo:
    info = _AGENTS.get(name)
    if info is None:
        known = ", ".join(sorted(_AGENTS)) or "none"
        raise AgentConfigError(f"unknown agent {name!r}; registered agents: {known}")
    return info


def validate_agent_config(name: str, config: dict[str, Any]) -> None:
    """Raise AgentConfigError if `config` cannot work for agent `name`."""
    info = agent_info(name)
    if info.validate is not None:
        info.validate(config)


def available_agents() -> list[AgentInfo]:
    return sorted(_AGENTS.values(), key=lambda a: a.name)


def make_agent(name: str, task: Task, config: dict[str, Any]) -> Agent:
    return agent_info(name).factory(task, config)


# Claude is imported when used: the anthropic SDK is not needed to run the other agents.
def _claude(task: Task, config: dict[str, Any]) -> Agent:
    from app.engine.agents.claude import ClaudeAgent

    return ClaudeAgent(task, config)


def _claude_config(config: dict[str, Any]) -> None:
    from app.engine.agents.claude_config import validate_config

    validate_config(config)


def _claude_unavailable() -> str | None:
    from app.settings import anthropic_api_key

    return None if anthropic_api_key() else "ANTHROPIC_API_KEY is not set on this server: the claude agent cannot start"


def _mcp_config(config: dict[str, Any]) -> None:
    if config:
        raise AgentConfigError("the mcp agent takes no options: the outside client chooses its own model")


def _register_builtin() -> None:
    from app.engine.agents import offline
    from app.engine.agents.mcp_agent import McpAgent

    register_agent("scripted", ScriptedAgent, "replays a fixed script of candidates (tests, demos)")
    register_agent("claude", _claude, "Claude through the Anthropic API with the workspace tools "
                   "(needs ANTHROPIC_API_KEY)", validate=_claude_config, unavailable=_claude_unavailable)
    register_agent("offline", offline.OfflineAgent, "search over the kernel family's knobs led by the leader's "
                   "profile (strategy measured; greedy: one layer at a time); a question moves it to another "
                   "layer (no model, no key)",
                   validate=offline.validate_config, candidate_kind="cuda")
    register_agent("mcp", McpAgent, "an outside agent (Claude Code or any MCP client) calling the workspace "
                   "tools at /mcp with the session's token", validate=_mcp_config)


_register_builtin()
