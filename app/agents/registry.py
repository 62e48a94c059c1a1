"""Agent backends by name. Later backends (Claude, the offline search agent, MCP clients)
register here with `register_agent`; the session form and the API list what is registered."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.agents.base import Agent, AgentConfigError, Task
from app.agents.scripted import ScriptedAgent

AgentFactory = Callable[[Task, dict[str, Any]], Agent]


@dataclass(frozen=True)
class AgentInfo:
    name: str
    description: str
    factory: AgentFactory


_AGENTS: dict[str, AgentInfo] = {}


def register_agent(name: str, factory: AgentFactory, description: str) -> None:
    _AGENTS[name] = AgentInfo(name, description, factory)


def available_agents() -> list[AgentInfo]:
    return sorted(_AGENTS.values(), key=lambda a: a.name)


def make_agent(name: str, task: Task, config: dict[str, Any]) -> Agent:
    info = _AGENTS.get(name)
    if info is None:
        known = ", ".join(sorted(_AGENTS)) or "none"
        raise AgentConfigError(f"unknown agent {name!r}; registered agents: {known}")
    return info.factory(task, config)


register_agent("scripted", ScriptedAgent, "replays a fixed script of candidates (tests, demos)")
