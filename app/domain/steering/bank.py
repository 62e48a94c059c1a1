"""The question bank inside steering, a thin adapter: ranked suggestions for a pause, evidence
credited from deliveries and evaluations, and the pause as the bank's auto-ask policy sees it.

The bank's domain lives in question_bank/; this module only translates between it and the
server's sessions, triggers and interventions. The waiting itself (a paused runner letting
the bank ask when its policy comes due) is the runner's: app/engine/runner/pause.py."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from sqlmodel import Session, col, select

from app.domain.profiles import leader_profile
from app.store.models import MANUAL, PAUSED, Intervention, SteeringSession, Trigger
from question_bank.auto_ask import PauseState
from question_bank.evidence import DEFAULT_WINDOW, record_evaluation, record_use
from question_bank.models import Author, BankUse
from question_bank.needs import SessionState
from question_bank.ranking import RankedQuestion, rank_for_pause
from question_bank.semantic import default_embedder
from question_bank.store import ensure_starter_bank

if TYPE_CHECKING:
    from app.domain.steering.suggestions import Suggestion
    from app.store.database import Database

log = logging.getLogger("socratic.bank")

BANK_AUTHOR = Author.BANK.value
# Pauses the bank never answers by itself: a person's own pause (they are there), and a spent
# budget (only a person can raise it before the session may resume).
NOT_AUTO_ASKED = (MANUAL, "budget")


def on_startup(database: Database, *, semantic: bool = True) -> None:
    """Load the starter bank into a new database, rank the pause banner's suggestions from now
    on, and warm the embedding model (if installed) in the background so that the first search
    as a person types is fast."""
    from app.domain.steering.suggestions import set_provider

    set_provider(provider)
    with database.session() as db:
        loaded = ensure_starter_bank(db)
    if loaded is not None:
        log.info("question bank: starter bank loaded (%s)", loaded.summary())
    if semantic:
        threading.Thread(target=default_embedder, name="bank-embedder-warmup", daemon=True).start()


# -- suggestions for the pause banner ------------------------------------------------------


def ranked_for_trigger(db: Session, session_id: int, trigger_kind: str, limit: int = 5) -> list[RankedQuestion]:
    """The bank's ranking for the session's pause: questions for its leader's findings first, and
    none that presumes what the session does not have yet (question_bank/needs.py)."""
    session = db.get(SteeringSession, session_id)
    if session is None:
        return rank_for_pause(db, session_id, trigger_kind, limit=limit)
    profile = leader_profile(db, session)
    findings = tuple(f.code for f in profile.findings) if profile is not None else ()
    state = SessionState(evaluations=session.evaluations, leader=session.leader_id is not None,
                         profile=profile is not None)
    return rank_for_pause(db, session_id, trigger_kind, problem=session.problem, limit=limit, findings=findings,
                          state=state)


def provider(trigger_kind: str, evidence: dict[str, Any], limit: int, session_id: int | None,
             db: Session | None) -> list[Suggestion]:
    """The pause banner's suggestions (app/domain/steering/suggestions.py): the bank's ranking for this
    session's pause. Without a session or database it defers to the server's starter list."""
    from app.domain.steering.suggestions import Suggestion

    if session_id is None or db is None:
        return []
    return [Suggestion(r.question.text, r.question.kind, f"bank:{r.question.key}")
            for r in ranked_for_trigger(db, session_id, trigger_kind, limit)]


# -- evidence: every delivered message, every evaluation ------------------------------------


def credit_delivery(db: Session, session: SteeringSession, items: list[Intervention],
                    window: int = DEFAULT_WINDOW) -> None:
    """Record each delivered message as a use (in the caller's transaction). A message typed
    with a bank question's text counts as that question; the bank's own asks were recorded
    when it asked."""
    if not items or session.id is None:
        return
    refs = [str(i.id) for i in items]
    known = set(db.exec(select(BankUse.intervention_ref).where(
        BankUse.session_ref == str(session.id), col(BankUse.intervention_ref).in_(refs))).all())
    trigger_kinds = {t.id: t.kind for t in db.exec(select(Trigger).where(
        col(Trigger.id).in_([i.trigger_id for i in items if i.trigger_id is not None])))}
    for item in items:
        if str(item.id) in known:
            continue
        record_use(
            db, session_ref=session.id, text=item.text, kind=item.kind,
            author=BANK_AUTHOR if item.author == BANK_AUTHOR else Author.PERSON.value,
            eval_index=session.evaluations, leader=session.leader_speedup, intervention_ref=item.id,
            trigger=trigger_kinds.get(item.trigger_id) if item.trigger_id is not None else None,
            window=window, used_at=item.delivered_at, commit=False,
        )


def credit_evaluation(db: Session, session: SteeringSession) -> None:
    """After each judged evaluation: credit the session's open uses (caller's transaction)."""
    if session.id is None:
        return
    record_evaluation(db, session_ref=session.id, eval_index=session.evaluations,
                      leader=session.leader_speedup, commit=False)


# -- auto-ask ------------------------------------------------------------------------------


def pause_state(db: Session, session: SteeringSession) -> PauseState | None:
    """The current pause as the bank's policy sees it, or None if the bank has no business in it."""
    if session.status != PAUSED or session.open_trigger_id is None or session.id is None:
        return None
    trigger = db.get(Trigger, session.open_trigger_id)
    if trigger is None or trigger.kind in NOT_AUTO_ASKED:
        return None
    during = list(db.exec(select(Intervention).where(Intervention.session_id == session.id,
                                                     Intervention.trigger_id == trigger.id)))
    people = [i.created_at for i in during if i.author != BANK_AUTHOR]
    profile = leader_profile(db, session)
    return PauseState(
        session_ref=str(session.id), trigger=trigger.kind, paused_at=trigger.created_at,
        last_person_at=max(people) if people else None,
        bank_asked=any(i.author == BANK_AUTHOR for i in during),
        bank_asks_in_a_row=bank_asks_in_a_row(db, session.id), problem=session.problem,
        findings=tuple(f.code for f in profile.findings) if profile is not None else (),
        state=SessionState(evaluations=session.evaluations, leader=session.leader_id is not None,
                           profile=profile is not None),
    )


def bank_asks_in_a_row(db: Session, session_id: int) -> int:
    """The bank's messages in this session since the last message a person sent."""
    authors = db.exec(select(Intervention.author).where(Intervention.session_id == session_id)
                      .order_by(col(Intervention.id).desc())).all()
    count = 0
    for author in authors:
        if author != BANK_AUTHOR:
            break
        count += 1
    return count
