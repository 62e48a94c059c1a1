"""What people do with the question bank about a session: find the messages worth promoting into
the bank, promote one (the pause it answered becomes its first trigger), read the bank's
ranking for the session's pause, set the session's auto-ask policy. The rules are
question_bank's (curation.py, ranking.py, auto_ask.py); this module finds the server's
sessions, messages and triggers for them. (app/domain/steering/bank.py is the other direction: what
sessions tell the bank.)"""

from __future__ import annotations

from sqlmodel import Session, col, select

from app.domain.sessions import Invalid, NotFound, get_session
from app.domain.steering.bank import ranked_for_trigger
from app.store.events import Unit
from app.store.models import Intervention, SteeringSession, Trigger
from question_bank import curation
from question_bank.auto_ask import AutoAskPolicy, set_policy
from question_bank.models import PAUSE_TRIGGERS
from question_bank.ranking import RankedQuestion

RECENT_MESSAGES = 30  # messages from sessions offered for promotion on the bank page


def session_message(db: Session, session_id: int, intervention_id: int) -> Intervention:
    item = db.get(Intervention, intervention_id)
    if item is None or item.session_id != session_id:
        raise NotFound(f"session {session_id} has no message {intervention_id}")
    return item


def answered_trigger(db: Session, item: Intervention) -> Trigger | None:
    return db.get(Trigger, item.trigger_id) if item.trigger_id is not None else None


def promote(db: Session, session_id: int, intervention_id: int, draft: curation.QuestionDraft,
            promoted_by: str) -> curation.Promotion:
    """Put a message sent in a session into the bank. Empty text, kind or problem in `draft`
    take the message's and the session's own."""
    session = get_session(db, session_id)
    item = session_message(db, session_id, intervention_id)
    answered = answered_trigger(db, item)
    draft.text = draft.text or item.text
    draft.kind = draft.kind or item.kind
    draft.problem = draft.problem if draft.problem is not None else session.problem
    draft.triggers = curation.answered_trigger_first(draft.triggers, answered.kind if answered else None)
    return curation.promote_message(db, draft, session_ref=session_id, message_ref=intervention_id,
                                    promoted_by=promoted_by)


def promotable(db: Session) -> list[curation.Promotable[Intervention]]:
    """Messages people sent in sessions whose text is not in the bank, newest first, with their gain."""
    newest = db.exec(select(Intervention).order_by(col(Intervention.id).desc()).limit(RECENT_MESSAGES * 4)).all()
    return curation.promotable_messages(db, newest, RECENT_MESSAGES)


def suggestions(db: Session, session_id: int, trigger: str | None, limit: int) -> list[RankedQuestion]:
    """The bank's ranking for the session's pause (`trigger` None: the one it is paused on, else manual)."""
    session: SteeringSession = get_session(db, session_id)
    if trigger is None:
        open_trigger = db.get(Trigger, session.open_trigger_id) if session.open_trigger_id else None
        trigger = open_trigger.kind if open_trigger is not None else "manual"
    if trigger not in PAUSE_TRIGGERS:
        raise Invalid(f"must be one of {', '.join(PAUSE_TRIGGERS)}", "trigger")
    return ranked_for_trigger(db, session_id, trigger, limit)


def set_auto_ask(unit: Unit, session_id: int, policy: AutoAskPolicy) -> AutoAskPolicy:
    """The session's auto-ask policy (a paused runner looks at it when woken)."""
    get_session(unit.db, session_id)
    return set_policy(unit.db, session_id, policy)
