"""The question bank's evidence from an imported session: its delivered messages and judged
evaluations replayed, in the order of its event log, through the same two calls a live session
makes (question_bank.evidence.record_use at each delivery, record_evaluation after each
verdict). The bank's tables are local to a database and not part of a trace, so without this
an imported session would credit nothing on /bank."""

from __future__ import annotations

from collections.abc import Iterable

from sqlmodel import Session

from app.store.models import LEADER, Event, Intervention, SteeringSession, Trigger
from question_bank.evidence import DEFAULT_WINDOW, record_evaluation, record_use
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
