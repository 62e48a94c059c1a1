"""A new session: check everything that could make it fail later (agent and its options,
candidate kind, baseline, scenarios, goal), then write it with its `session_created` event.
The one domain operation that consults the agent registry, so app/domain/sessions.py need not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.domain.schemas import SessionCreate
from app.domain.sessions import Invalid, start
from app.domain.steering import goal as goals
from app.engine.agents.base import AgentConfigError
from app.settings import Settings
from app.store.events import Unit
from app.store.models import CUDA, PYTHON_CPU, SteeringSession


@dataclass
class NewSession:
    agent: str
    kind: str
    baseline: str
    scenarios: list[dict[str, Any]] | None
    thresholds: dict[str, Any]


def validate_new_session(spec: SessionCreate, settings: Settings) -> NewSession:
    """Check everything that could make the session fail later. Raises Invalid before
    anything is written."""
    from app.domain.kernel_names import BASELINE, UnknownKernel, kernel_path
    from app.engine.agents.registry import agent_info, available_agents, validate_agent_config
    from app.engine.agents.scripted import resolve_script
    from app.engine.agents.scripts import BUILTIN_SCRIPTS
    from app.services.evaluation import PYTHON_TARGET

    agent = spec.agent or default_agent(spec.agent_config, settings)
    spec = spec.model_copy(update={"agent": agent})
    names = [a.name for a in available_agents()]
    if spec.agent not in names:
        raise Invalid(f"unknown agent {spec.agent!r}; registered agents: {', '.join(names)}", "agent")
    script = None
    if spec.agent == "scripted":
        try:
            resolve_script(spec.agent_config)
        except AgentConfigError as exc:
            raise Invalid(str(exc), "agent_config") from exc
        script = BUILTIN_SCRIPTS.get(spec.agent_config.get("script", "cpu-demo")) \
            if "steps" not in spec.agent_config else None
    else:
        try:
            validate_agent_config(spec.agent, spec.agent_config)
        except AgentConfigError as exc:
            raise Invalid(str(exc), "agent_config") from exc
    needs = agent_info(spec.agent).candidate_kind
    kind = spec.candidate_kind or (script.candidate_kind if script else needs or CUDA)
    if needs and kind != needs:
        raise Invalid(f"the {spec.agent} agent writes {needs} candidates, not {kind}", "candidate_kind")
    baseline = spec.baseline or (script.baseline if script and script.candidate_kind == kind else "")
    if kind == PYTHON_CPU:
        if not settings.allow_python_candidates:
            raise Invalid("python-cpu candidates are disabled on this server "
                          "(set SOCRATIC_ALLOW_PYTHON_CANDIDATES=1 for tests and demos)", "candidate_kind")
        if not baseline or not PYTHON_TARGET.match(baseline):
            raise Invalid("a python-cpu session needs a baseline given as module:function", "baseline")
    else:
        baseline = baseline or BASELINE
        try:
            kernel_path(baseline, "baseline")
        except UnknownKernel as exc:
            raise Invalid(str(exc), "baseline") from exc
    scenarios = [s.model_dump() for s in spec.scenarios] if spec.scenarios else None
    if scenarios:
        from harness.scenario import Scenario

        for s in scenarios:
            try:
                Scenario.from_dict(s)
            except ValueError as exc:
                raise Invalid(str(exc), "scenarios") from exc
    elif spec.suite_filter:
        from harness.attention.suite import default_suite
        from harness.suite import select as select_scenarios

        try:
            chosen = select_scenarios(default_suite(), "all", spec.suite_filter)
        except ValueError as exc:
            raise Invalid(str(exc), "suite_filter") from exc
        if not chosen:
            raise Invalid(f"no scenario matches the filter {spec.suite_filter!r}", "suite_filter")
    if spec.goal_metric != "vs_baseline" and kind == PYTHON_CPU:
        raise Invalid("python-cpu sessions time no peers: use the goal metric vs_baseline", "goal_metric")
    thresholds = spec.thresholds.model_dump(exclude_unset=True)
    if script is not None:
        thresholds = {**script.thresholds, **thresholds}
    return NewSession(agent, kind, baseline, scenarios, {**spec.thresholds.model_dump(), **thresholds})


def refuse_unavailable(spec: SessionCreate, settings: Settings) -> None:
    """Raise Invalid when the session would start with an agent that cannot start here (the
    claude agent without ANTHROPIC_API_KEY): the reason now, not a failed session later. A
    session created without starting is still allowed (the key may be set before it starts)."""
    from app.engine.agents.registry import available_agents

    name = spec.agent or default_agent(spec.agent_config, settings)
    info = next((a for a in available_agents() if a.name == name), None)
    reason = info.why_unavailable() if info is not None and spec.start else None
    if reason:
        raise Invalid(reason, "agent")


def default_agent(config: dict[str, Any], settings: Settings) -> str:
    """The agent of a session that names none: scripted when its config names a script or
    steps, else the server's default (claude with an API key, offline without)."""
    return "scripted" if "script" in config or "steps" in config else settings.default_agent


def create_session(unit: Unit, spec: SessionCreate, settings: Settings) -> SteeringSession:
    new = validate_new_session(spec, settings)
    kind, baseline = new.kind, new.baseline
    session = SteeringSession(
        title=spec.title, agent=new.agent, agent_config=spec.agent_config, candidate_kind=kind,
        baseline=baseline, suite_filter=spec.suite_filter, scenarios=new.scenarios,
        goal_metric=spec.goal_metric, goal_target=spec.goal_target,
        thresholds=new.thresholds,
        budget_steps=spec.budget.steps, budget_tokens=spec.budget.tokens,
        budget_cost_usd=spec.budget.cost_usd, budget_seconds=spec.budget.seconds,
    )
    unit.db.add(session)
    unit.db.flush()
    unit.record(session, "session_created", {
        "title": session.title, "agent": session.agent, "candidate_kind": kind, "baseline": baseline,
        "goal": goals.describe(session.goal_metric, session.goal_target),
    })
    return session


def open_session(unit: Unit, spec: SessionCreate, settings: Settings) -> SteeringSession:
    """Create the session and, unless the spec says otherwise, start it (the API and the form)."""
    session = create_session(unit, spec, settings)
    if spec.start:
        start(unit, session.id or 0)
    return session
