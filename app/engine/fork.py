"""Fork: a new session that starts from any candidate of any session (live or imported). Its
settings are the source session's unless the request changes them; the candidate is copied in
as candidate #1 and leads from the start (its suite evaluation copied with it, so the fork's
audit draws it); a `forked` event, first after `session_created`, names where it came from and
who forked it (app/domain/forks.py reads the lineage back; an imported source is never written
to).

A fork continues from the candidate: the offline agent starts from the knob setting the kernel
records in its header (its `start` option; it does not submit that setting again, it leads
already: app/engine/agents/offline.py), and a model's working copy (Claude, an MCP client)
holds the candidate's source (app/engine/tools/workspace.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from sqlmodel import Session, col, select

from app.domain.forks import FORKED
from app.domain.schemas import MAX_GOAL, BudgetIn, InputModel, ScenarioIn, SessionCreate, ThresholdsIn
from app.domain.sessions import Invalid, NotFound, get_session, start
from app.engine.agents.offline import start_spec
from app.engine.new_session import create_session, refuse_unavailable
from app.engine.runner_state import RunnerState
from app.engine.tools.workspace import Draft
from app.settings import Settings
from app.store.events import Unit
from app.store.models import BACKUP, EVALUATED, LEADER, Candidate, Evaluation, SteeringSession
from kernels.attention.family.render import recorded_knobs


class ForkCreate(InputModel):
    """What a fork may change; everything left out is copied from the source session (checked
    against the same limits as every other input: app/domain/schemas.py's InputModel)."""

    title: str | None = Field(default=None, min_length=1, max_length=200)
    agent: str | None = Field(default=None, min_length=1, max_length=80)
    agent_config: dict[str, Any] | None = None
    goal_target: float | None = Field(default=None, gt=0, le=MAX_GOAL)
    thresholds: ThresholdsIn | None = None
    budget: BudgetIn | None = None
    start: bool = True
    author: str | None = Field(default=None, min_length=1, max_length=80, description="who forks (a person's name)")


def _known(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k in model.model_fields}


def continued_config(agent: str, config: dict[str, Any], candidate: Candidate, explicit: bool) -> dict[str, Any]:
    """The agent's options for a fork that continues from `candidate`: the offline agent starts
    from the knob setting the kernel records (unless the request names a `start` itself); a
    kernel that records none (not a family kernel) leaves the options as they are."""
    if agent != "offline" or explicit:
        return config
    knobs = recorded_knobs(candidate.source)
    if knobs is None:
        return config
    try:
        return {**config, "start": start_spec(knobs)}
    except (TypeError, ValueError):  # a record the family no longer accepts: the agent's own start
        return config


def fork_spec(source: SteeringSession, candidate: Candidate, change: ForkCreate) -> SessionCreate:
    """The new session's settings: the source's, with the request's changes (the agent's options
    are copied only for the same agent)."""
    budget = change.budget or BudgetIn(steps=source.budget_steps, tokens=source.budget_tokens,
                                       cost_usd=source.budget_cost_usd, seconds=source.budget_seconds)
    agent = change.agent or source.agent
    if change.agent_config is not None:
        config = dict(change.agent_config)
    else:
        config = dict(source.agent_config) if agent == source.agent else {}
    explicit = change.agent_config is not None and "start" in change.agent_config
    return SessionCreate(
        title=change.title or f"{source.title[:180]} · fork of #{candidate.number}",
        agent=agent,
        agent_config=continued_config(agent, config, candidate, explicit),
        candidate_kind=source.candidate_kind,  # type: ignore[arg-type]
        baseline=source.baseline, suite_filter=source.suite_filter,
        scenarios=[ScenarioIn(**_known(ScenarioIn, s)) for s in source.scenarios] if source.scenarios else None,
        goal_metric=source.goal_metric,
        goal_target=change.goal_target if change.goal_target is not None else source.goal_target,
        thresholds=change.thresholds or ThresholdsIn(**_known(ThresholdsIn, source.thresholds)),
        budget=budget, start=change.start,
    )


def source_candidate(db: Session, session_id: int, number: int) -> tuple[SteeringSession, Candidate]:
    source = get_session(db, session_id)
    c = db.exec(select(Candidate).where(Candidate.session_id == session_id, Candidate.number == number)).first()
    if c is None:
        raise NotFound(f"session {session_id} has no candidate #{number}")
    return source, c


def fork_session(unit: Unit, settings: Settings, session_id: int, number: int, change: ForkCreate,
                 author: str) -> SteeringSession:
    """Create (and, unless asked not to, start) the fork. Raises NotFound, Invalid."""
    source, c = source_candidate(unit.db, session_id, number)
    if c.status != EVALUATED or c.speedup is None or c.verdict not in (LEADER, BACKUP):
        # Only a candidate the judge found correct can lead from the start; the others' code is
        # one read_candidate away in the source session's audit.
        raise Invalid(f"candidate #{number} of session {session_id} cannot start a fork: it is "
                      f"{c.verdict or c.status}, not a correct evaluated candidate (leader or backup)")
    try:
        spec = fork_spec(source, c, change)
    except ValidationError as exc:  # a source imported or made under older rules
        raise Invalid(f"session {session_id}'s settings cannot be copied into a new session: "
                      f"{exc.errors()[0].get('msg', exc)}") from exc
    refuse_unavailable(spec, settings)
    session = create_session(unit, spec, settings)
    seed = Candidate(session_id=session.id or 0, number=1, author=c.author, kind=c.kind,
                     title=c.title, notes=c.notes, source=c.source, status=EVALUATED, verdict=LEADER,
                     verdict_reason=f"forked from session {session_id} candidate #{number} "
                                    f"(there: {c.verdict})",
                     speedup=c.speedup, visible_speedup=c.visible_speedup, passed=c.passed,
                     scenario_count=c.scenario_count, flags=list(c.flags))
    unit.db.add(seed)
    unit.db.flush()
    for e in unit.db.exec(select(Evaluation).where(Evaluation.candidate_id == c.id, Evaluation.purpose == "suite")
                          .order_by(col(Evaluation.id))):
        unit.db.add(Evaluation(candidate_id=seed.id or 0, purpose=e.purpose, against=e.against,
                               report=e.report, device=e.device, seconds=0.0))
    session.leader_id = seed.id
    session.leader_speedup = c.speedup
    # a model's working copy starts as the candidate's source (read_kernel "current": from candidate #1)
    RunnerState.load(session).save(unit, session, workspace=asdict(Draft(c.source, seed.number)))
    unit.record(session, FORKED, {"from_session": session_id, "from_title": source.title,
                                  "from_candidate": number, "number": 1, "speedup": c.speedup,
                                  "author": author})
    if change.start:
        start(unit, session.id or 0)
    return session
