"""Domain operations on sessions: start and steer (pause, resume, stop, send a message),
open and resolve triggers, deliver interventions, and the read models pages and the API
share. Plain functions over a Unit (one transaction plus the events it records); they never
await, so a unit's work is atomic on the event loop. Runtime effects (waking a runner) are
the caller's business (app/faces/web/deps.py wakes the runner). Creating a session, which consults
the agent registry, is app/engine/new_session.py's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, func, select

from app.domain.lifecycle import FINAL_STATES, check_transition
from app.domain.schemas import BudgetIn, InterventionCreate, SessionUpdate
from app.domain.steering import bank
from app.domain.steering import goal as goals
from app.domain.steering.triggers import (
    Budget,
    BudgetUse,
    EvaluationPoint,
    Thresholds,
    TriggerHit,
    check_budget,
)
from app.store.events import Unit
from app.store.models import (
    CREATED,
    DELIVERED,
    EVALUATED,
    INTERRUPTED,
    LEADER,
    PAUSED,
    PENDING,
    QUEUE,
    RUNNING,
    STEER,
    STOPPED,
    UNDELIVERED,
    Candidate,
    Evaluation,
    Intervention,
    SteeringSession,
    Trigger,
    utcnow,
)
from harness.report import EvaluationReport


class NotFound(LookupError):
    pass


class Invalid(ValueError):
    """A request that is well-formed but cannot be carried out; nothing was written."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Conflict(ValueError):
    """The session's state does not allow the action (HTTP 409)."""


# -- lookups -------------------------------------------------------------------------------


def get_session(db: Session, session_id: int) -> SteeringSession:
    session = db.get(SteeringSession, session_id)
    if session is None:
        raise NotFound(f"no session {session_id}")
    return session


def check_writable(session: SteeringSession) -> None:
    """An imported session (app/domain/audit/trace_io.py) is a record: it never runs or changes again."""
    if session.read_only:
        raise Conflict(f"session {session.id} was imported from a trace and is read-only: it can be "
                       "audited, not run or steered")


def list_sessions(db: Session) -> Sequence[SteeringSession]:
    return db.exec(select(SteeringSession).order_by(col(SteeringSession.id).desc())).all()


def candidates_of(db: Session, session_id: int) -> Sequence[Candidate]:
    return db.exec(select(Candidate).where(Candidate.session_id == session_id)
                   .order_by(col(Candidate.number))).all()


def candidate_by_number(db: Session, session_id: int, number: int) -> Candidate:
    found = db.exec(select(Candidate).where(Candidate.session_id == session_id,
                                            Candidate.number == number)).first()
    if found is None:
        raise NotFound(f"session {session_id} has no candidate #{number}")
    return found


def parent_of(db: Session, c: Candidate) -> Candidate | None:
    """The candidate `c` was derived from, if it names one."""
    return db.get(Candidate, c.parent_id) if c.parent_id else None


def evaluations_of(db: Session, candidate_id: int) -> Sequence[Evaluation]:
    return db.exec(select(Evaluation).where(Evaluation.candidate_id == candidate_id)
                   .order_by(col(Evaluation.id))).all()


def latest_evaluation(db: Session, candidate_id: int, purpose: str) -> Evaluation | None:
    """The candidate's newest evaluation of this purpose (`suite` or `retime`)."""
    return db.exec(select(Evaluation).where(Evaluation.candidate_id == candidate_id, Evaluation.purpose == purpose)
                   .order_by(col(Evaluation.id).desc())).first()


@dataclass(frozen=True)
class LeaderBasis:
    """What a session's leader speedup is a geomean over: its scenarios and the GPU."""

    passed: int
    scenarios: int
    gpu: str


def leader_basis(db: Session, session: SteeringSession) -> LeaderBasis | None:
    leader = db.get(Candidate, session.leader_id) if session.leader_id else None
    if leader is None:
        return None
    suite = latest_evaluation(db, leader.id or 0, "suite")
    return LeaderBasis(leader.passed or 0, leader.scenario_count or 0, suite.device if suite is not None else "")


def stored_report(db: Session, evaluation_id: int) -> dict[str, Any] | None:
    """One evaluation's report as stored (its JSON), without loading the other columns."""
    report = db.exec(select(Evaluation.report).where(Evaluation.id == evaluation_id)).first()
    return report if isinstance(report, dict) else None


def suite_report(db: Session, candidate_id: int | None) -> EvaluationReport | None:
    """The candidate's own suite evaluation as a report (None: not stored, as for an imported one)."""
    row = latest_evaluation(db, candidate_id, "suite") if candidate_id else None
    return EvaluationReport.from_dict(row.report) if row is not None else None


def triggers_of(db: Session, session_id: int) -> Sequence[Trigger]:
    return db.exec(select(Trigger).where(Trigger.session_id == session_id).order_by(col(Trigger.id))).all()


def interventions_of(db: Session, session_id: int) -> Sequence[Intervention]:
    return db.exec(select(Intervention).where(Intervention.session_id == session_id)
                   .order_by(col(Intervention.id))).all()


def count_rows(db: Session, model: type[Candidate] | type[Intervention], session_id: int) -> int:
    return int(db.exec(select(func.count()).select_from(model)
                       .where(model.session_id == session_id)).one())


def open_trigger(db: Session, session: SteeringSession) -> Trigger | None:
    return db.get(Trigger, session.open_trigger_id) if session.open_trigger_id else None


def thresholds(session: SteeringSession) -> Thresholds:
    return Thresholds.from_dict(session.thresholds)


def evaluation_points(db: Session, session_id: int) -> list[EvaluationPoint]:
    """Evaluated candidates in order, with the leader's speedup after each verdict."""
    points = []
    leader: float | None = None
    for c in candidates_of(db, session_id):
        if c.status != EVALUATED:
            continue
        if c.verdict == LEADER:
            leader = c.speedup
        points.append(EvaluationPoint(c.number, c.verdict or "", c.speedup, leader))
    return points


# -- state changes -------------------------------------------------------------------------


def set_status(unit: Unit, session: SteeringSession, status: str, *, detail: str = "",
               payload: dict[str, Any] | None = None) -> None:
    check_writable(session)
    check_transition(session.status, status)
    previous = session.status
    session.status = status
    session.detail = detail
    if status in FINAL_STATES:
        session.finished_at = utcnow()
    unit.record(session, "status", {"from": previous, "to": status, "detail": detail, **(payload or {})})
    if status in FINAL_STATES:
        never_delivered(unit, session)


def never_delivered(unit: Unit, session: SteeringSession) -> list[int]:
    """A session that ends takes no more messages: those still waiting for a tool boundary are
    marked undelivered (the page and the audit say so, the credit never counts them)."""
    waiting = list(unit.db.exec(select(Intervention).where(Intervention.session_id == session.id,
                                                           Intervention.status == PENDING)).all())
    for item in waiting:
        item.status = UNDELIVERED
        unit.db.add(item)
    if waiting:
        unit.record(session, "undelivered", {
            "intervention_ids": [i.id for i in waiting],
            "reason": f"the session became {session.status} before its agent reached a tool boundary"})
    return [i.id or 0 for i in waiting]


def start(unit: Unit, session_id: int) -> SteeringSession:
    session = get_session(unit.db, session_id)
    if session.status != CREATED:
        raise Conflict(f"session {session_id} is {session.status}; only a created session can be started")
    set_status(unit, session, RUNNING, detail="starting: the agent is preparing its first candidate "
                                              "(a CUDA kernel compiles before it waits for a GPU)")
    return session


def fire_trigger(unit: Unit, session: SteeringSession, hit: TriggerHit) -> Trigger | None:
    """Open a trigger and pause the session. A session already paused keeps its open trigger."""
    if session.status != RUNNING:
        return None
    trigger = Trigger(session_id=session.id or 0, kind=hit.kind, summary=hit.summary, evidence=hit.evidence)
    unit.db.add(trigger)
    unit.db.flush()
    session.open_trigger_id = trigger.id
    unit.record(session, "trigger", {"trigger_id": trigger.id, "kind": hit.kind, "summary": hit.summary,
                                     "evidence": hit.evidence})
    set_status(unit, session, PAUSED, detail=hit.summary, payload={"trigger_id": trigger.id})
    return trigger


def pause(unit: Unit, session_id: int, author: str, reason: str = "") -> Trigger:
    from app.domain.steering.triggers import manual

    session = get_session(unit.db, session_id)
    if session.status != RUNNING:
        raise Conflict(f"session {session_id} is {session.status}; only a running session can be paused")
    trigger = fire_trigger(unit, session, manual(author, reason))
    assert trigger is not None
    return trigger


def budget_of(session: SteeringSession) -> Budget:
    return Budget(session.budget_steps, session.budget_tokens, session.budget_cost_usd, session.budget_seconds)


def budget_use(session: SteeringSession) -> BudgetUse:
    return BudgetUse(session.used_steps, session.used_tokens, session.used_cost_usd, session.used_seconds)


def resume(unit: Unit, session_id: int, author: str) -> SteeringSession:
    session = get_session(unit.db, session_id)
    if session.status not in (PAUSED, INTERRUPTED):
        raise Conflict(f"session {session_id} is {session.status}; only a paused or interrupted "
                       "session can be resumed")
    spent = check_budget(budget_use(session), budget_of(session))
    if spent is not None:
        raise Conflict(f"{spent.summary}: raise the budget (PATCH the session) before resuming")
    trigger = open_trigger(unit.db, session)
    if trigger is not None and trigger.resolved_at is None:
        trigger.resolved_at = utcnow()
        trigger.resolution = f"resumed by {author}"
        unit.db.add(trigger)
    session.open_trigger_id = None
    session.window_start = session.evaluations  # a plateau counts evaluations from here
    set_status(unit, session, RUNNING, detail="resumed", payload={"author": author})
    return session


def stop(unit: Unit, session_id: int, author: str, reason: str = "") -> SteeringSession:
    session = get_session(unit.db, session_id)
    if session.status in FINAL_STATES:
        raise Conflict(f"session {session_id} is already {session.status}")
    trigger = open_trigger(unit.db, session)
    if trigger is not None and trigger.resolved_at is None:
        trigger.resolved_at = utcnow()
        trigger.resolution = f"stopped by {author}"
        unit.db.add(trigger)
    session.open_trigger_id = None
    set_status(unit, session, STOPPED, detail=f"stopped by {author}" + (f": {reason}" if reason else ""),
               payload={"author": author})
    return session


def interrupt_running(unit: Unit) -> list[int]:
    """At startup: sessions that were running when the server stopped become interrupted."""
    ids = []
    for session in unit.db.exec(select(SteeringSession).where(SteeringSession.status == RUNNING,
                                                              col(SteeringSession.read_only).is_(False))).all():
        set_status(unit, session, INTERRUPTED, detail="the server restarted while this session ran; "
                   "resume it to continue where it was")
        ids.append(session.id or 0)
    return ids


def update_session(unit: Unit, session_id: int, change: SessionUpdate) -> SteeringSession:
    session = get_session(unit.db, session_id)
    check_writable(session)
    changed: dict[str, Any] = {}
    if change.title is not None:
        session.title = changed["title"] = change.title.strip()
    if change.goal_target is not None:
        session.goal_target = changed["goal_target"] = change.goal_target
    if change.thresholds is not None:
        session.thresholds = changed["thresholds"] = change.thresholds.model_dump()
    if change.budget is not None:
        b: BudgetIn = change.budget
        session.budget_steps, session.budget_tokens = b.steps, b.tokens
        session.budget_cost_usd, session.budget_seconds = b.cost_usd, b.seconds
        changed["budget"] = b.model_dump()
    if changed:
        unit.record(session, "settings_changed", changed)
    return session


# -- interventions -------------------------------------------------------------------------


def send_intervention(unit: Unit, session_id: int, msg: InterventionCreate) -> Intervention:
    session = get_session(unit.db, session_id)
    check_writable(session)
    if session.status in FINAL_STATES:
        raise Conflict(f"session {session_id} is {session.status}; it takes no more messages")
    intervention = Intervention(
        session_id=session_id, author=msg.author, kind=msg.kind, mode=msg.mode, text=msg.text,
        trigger_id=session.open_trigger_id,
    )
    unit.db.add(intervention)
    unit.db.flush()
    unit.record(session, "intervention", {
        "intervention_id": intervention.id, "author": msg.author, "kind": msg.kind, "mode": msg.mode,
        "text": msg.text, "trigger_id": intervention.trigger_id,
    })
    return intervention


def send_message(unit: Unit, session_id: int, msg: InterventionCreate) -> Intervention:
    """A person's message; with `resume` it also resumes a paused or interrupted session."""
    item = send_intervention(unit, session_id, msg)
    if msg.resume and get_session(unit.db, session_id).status in (PAUSED, INTERRUPTED):
        resume(unit, session_id, msg.author)
    return item


def deliverable(db: Session, session_id: int, turn_ended: bool) -> list[Intervention]:
    """Pending messages to hand over now, oldest first: steer ones at any tool boundary,
    queued ones only when the agent's turn has ended."""
    modes = [STEER, QUEUE] if turn_ended else [STEER]
    return list(db.exec(
        select(Intervention).where(Intervention.session_id == session_id, Intervention.status == PENDING,
                                   col(Intervention.mode).in_(modes))
        .order_by(col(Intervention.id))
    ).all())


def mark_delivered(unit: Unit, session: SteeringSession, items: list[Intervention]) -> None:
    now = utcnow()
    for item in items:
        item.status = DELIVERED
        item.delivered_at = now
        item.leader_at_delivery = session.leader_speedup if session.leader_speedup is not None else 1.0
        unit.db.add(item)
    if items:
        unit.record(session, "delivered", {"intervention_ids": [i.id for i in items],
                                           "texts": [i.text for i in items]})
        bank.credit_delivery(unit.db, session, items, window=thresholds(session).credit_window)


def credit_interventions(unit: Unit, session: SteeringSession) -> None:
    """After each evaluation: credit the messages of the latest delivery with the leader gain since
    them, over their next K evaluations (K = credit_window). An earlier message's window ends where
    a later one reached the agent, so no new leader is credited twice (question_bank/evidence.py's
    rule); messages delivered together share the credit of their boundary."""
    k = thresholds(session).credit_window
    leader = session.leader_speedup if session.leader_speedup is not None else 1.0
    delivered = list(unit.db.exec(select(Intervention).where(Intervention.session_id == session.id,
                                                             Intervention.status == DELIVERED)).all())
    # One delivery stamps its messages with one time (mark_delivered): the latest stamp owns this
    # evaluation; earlier messages were superseded by it.
    latest = max((i.delivered_at for i in delivered if i.delivered_at is not None), default=None)
    for item in delivered:
        if item.delivered_at != latest or item.evaluations_after >= k:
            continue
        item.evaluations_after += 1
        item.credited_gain = leader / (item.leader_at_delivery or 1.0)
        unit.db.add(item)
    bank.credit_evaluation(unit.db, session)  # the bank's evidence, per question and overall


# -- read models ---------------------------------------------------------------------------


@dataclass
class SessionView:
    """Everything a page or the API shows about a session at one moment."""

    session: SteeringSession
    leader: Candidate | None
    candidates: list[Candidate]
    interventions: list[Intervention]
    trigger: Trigger | None
    goal_text: str

    @property
    def paused(self) -> bool:
        return self.session.status == PAUSED


def session_view(db: Session, session_id: int) -> SessionView:
    session = get_session(db, session_id)
    cands = list(candidates_of(db, session_id))
    leader = next((c for c in cands if c.id == session.leader_id), None)
    return SessionView(session, leader, cands, list(interventions_of(db, session_id)),
                       open_trigger(db, session), goals.describe(session.goal_metric, session.goal_target))


def public_session(db: Session, session: SteeringSession) -> dict[str, Any]:
    sid = session.id or 0
    leader = db.get(Candidate, session.leader_id) if session.leader_id else None
    return {
        **session.model_dump(exclude={"runner_state", "scenarios", "budget_steps", "budget_tokens",
                                      "budget_cost_usd", "budget_seconds", "used_steps", "used_tokens",
                                      "used_cost_usd", "used_seconds", "window_start"}),
        "id": sid,
        "goal": goals.describe(session.goal_metric, session.goal_target),
        "budget": budget_of(session).__dict__,
        "used": budget_use(session).__dict__,
        "leader_number": leader.number if leader else None,
        "candidates": count_rows(db, Candidate, sid),
        "interventions": count_rows(db, Intervention, sid),
    }


def public_candidate(db: Session, c: Candidate) -> dict[str, Any]:
    parent = db.get(Candidate, c.parent_id) if c.parent_id else None
    d = c.model_dump(exclude={"source", "parent_id"})
    d["parent_number"] = parent.number if parent else None
    return d
