"""The question bank's evidence read from sessions' event logs.

`replay_evidence`: an imported session's delivered messages and judged evaluations replayed, in
the order of its event log, through the same two calls a live session makes
(question_bank.evidence.record_use at each delivery, record_evaluation after each verdict). The
bank's tables are local to a database and not part of a trace, so without this an imported
session would credit nothing on /bank.

`silent_control`: the same measure for pauses resumed without a word (the control a question's
gain is read against), from every session's log, live or imported."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.store.models import LEADER, PAUSED, RUNNING, Event, Intervention, SteeringSession, Trigger
from question_bank.evidence import (
    DEFAULT_WINDOW,
    EvidenceStats,
    record_evaluation,
    record_use,
    silent_gains,
    stats_of,
)
from question_bank.models import Author


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def replay_evidence(db: Session, session: SteeringSession, events: Iterable[Event],
                    messages: dict[int, Intervention], triggers: dict[int, Trigger]) -> int:
    """Record the session's deliveries as bank uses and credit them with its evaluations.
    `messages` and `triggers` map the ids the event payloads carry to rows. Returns the uses
    recorded. In the caller's transaction; a bank question is matched by its text, so the
    starter bank must be loaded before (question_bank.store.ensure_starter_bank)."""
    if session.id is None:
        return 0
    window = int(session.thresholds.get("credit_window") or DEFAULT_WINDOW)
    evaluations, leader, recorded = 0, 1.0, 0
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        if event.kind == "delivered":
            for ref in payload.get("intervention_ids") or []:
                item = messages.get(ref) if isinstance(ref, int) else None
                if item is None or item.kind not in ("question", "information"):
                    continue
                trigger = triggers.get(item.trigger_id) if item.trigger_id is not None else None
                record_use(db, session_ref=session.id, text=item.text, kind=item.kind,
                           author=Author.BANK.value if item.author == Author.BANK.value else Author.PERSON.value,
                           eval_index=evaluations, leader=leader, intervention_ref=item.id,
                           trigger=trigger.kind if trigger is not None else None, window=window,
                           used_at=item.delivered_at or event.created_at, commit=False)
                recorded += 1
        elif event.kind == "leader":
            leader = _number(payload.get("speedup")) or leader
        elif event.kind == "verdict":
            evaluations += 1
            if payload.get("verdict") == LEADER:
                leader = _number(payload.get("speedup")) or leader
            record_evaluation(db, session_ref=session.id, eval_index=evaluations, leader=leader, commit=False)
    return recorded


@dataclass
class PauseLog:
    """A session's log as the credit rule reads it."""

    leaders: list[float] = field(default_factory=lambda: [1.0])  # [n]: the leader after n evaluations
    messages: list[int] = field(default_factory=list)  # evaluations finished at each delivery
    silent: list[int] = field(default_factory=list)  # ... at each pause resumed without a message

    def silent_gains(self, window: int) -> list[float | None]:
        return silent_gains(self.leaders, self.messages, self.silent, window)


LOGGED = ("delivered", "leader", "verdict", "status")  # the event kinds a PauseLog reads


def pause_log(events: Iterable[Event]) -> PauseLog:
    """Leaders, deliveries and silent resumes from a session's events in order. A resume is
    silent when it ends a pause (paused -> running) and no message reaches the agent before its
    next evaluation: a message sent with the resume, or typed just after it, makes it no control."""
    log = PauseLog()
    leader = 1.0
    resumed_at: int | None = None  # a resume not yet followed by a delivery or an evaluation
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        evaluations = len(log.leaders) - 1
        if event.kind == "delivered" and payload.get("intervention_ids"):
            log.messages.append(evaluations)
            resumed_at = None
        elif event.kind == "leader":
            leader = _number(payload.get("speedup")) or leader
        elif event.kind == "verdict":
            if payload.get("verdict") == LEADER:
                leader = _number(payload.get("speedup")) or leader
            if resumed_at is not None:
                log.silent.append(resumed_at)
                resumed_at = None
            log.leaders.append(leader if leader > 0 else 1.0)
        elif event.kind == "status" and payload.get("from") == PAUSED and payload.get("to") == RUNNING:
            resumed_at = evaluations
    return log


@dataclass(frozen=True)
class ControlEvidence:
    """Pauses resumed without a message, credited as messages are: the gain a question's is
    read against. `sessions`: how many sessions had at least one such pause."""

    stats: EvidenceStats
    sessions: int


# per database engine: (the newest event's id, the sessions' count) -> the control computed then
_KNOWN: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], ControlEvidence]] = weakref.WeakKeyDictionary()
_KNOWN_LOCK = threading.Lock()


def silent_control(db: Session) -> ControlEvidence:
    """The silent control over every session in the database (live and imported). Events are
    only ever appended: while no event and no session was added, the last answer stands."""
    mark = (db.exec(select(func.max(Event.id))).one() or 0, db.exec(select(func.count(col(SteeringSession.id)))).one())
    engine = db.get_bind().engine
    with _KNOWN_LOCK:
        known = _KNOWN.get(engine)
    if known is not None and known[0] == mark:
        return known[1]
    found = _silent_control(db)
    with _KNOWN_LOCK:
        _KNOWN[engine] = (mark, found)
    return found


def _silent_control(db: Session) -> ControlEvidence:
    windows = {s.id: int(s.thresholds.get("credit_window") or DEFAULT_WINDOW)
               for s in db.exec(select(SteeringSession))}
    by_session: dict[int, list[Event]] = {}
    for event in db.exec(select(Event).where(col(Event.kind).in_(LOGGED))
                         .order_by(col(Event.session_id), col(Event.seq))):
        by_session.setdefault(event.session_id, []).append(event)
    gains: list[float | None] = []
    sessions = 0
    for session_id, events in by_session.items():
        found = pause_log(events).silent_gains(windows.get(session_id, DEFAULT_WINDOW))
        if found:
            sessions += 1
            gains.extend(found)
    return ControlEvidence(stats_of(gains), sessions)
