"""What a paused runner does: wait for a wake-up (a person resumes, stops or writes), but if
the session's auto-ask policy comes due first, let the question bank ask, which resumes it.
The policy is question_bank/auto_ask.py's; the pause as the bank sees it, app/domain/steering/bank.py's."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from app.domain.schemas import InterventionCreate
from app.domain.sessions import Conflict, resume, send_intervention
from app.domain.steering.bank import BANK_AUTHOR, pause_state
from app.services.context import ServerContext
from app.store.models import PAUSED, SteeringSession
from question_bank.auto_ask import AutoAsker

log = logging.getLogger("socratic.bank")


class _NotDelivered(Exception):
    pass


def auto_ask_step(ctx: ServerContext, session_id: int, asker: AutoAsker) -> float | None:
    """Ask now if the session's policy says so. Returns seconds until the bank should look again
    (0: it asked, or the session is no longer paused), or None: not during this pause."""
    try:
        with ctx.unit() as u:
            session = u.db.get(SteeringSession, session_id)
            if session is None or session.status != PAUSED:
                return 0.0
            pause = pause_state(u.db, session)
            if pause is None:
                return None
            wait = asker.seconds_until_due(u.db, pause)
            if wait is None or wait > 0:
                return wait

            def deliver(question: Any, reason: str) -> int:
                msg = InterventionCreate(text=question.text, kind=question.kind, mode="steer", author=BANK_AUTHOR)
                intervention = send_intervention(u, session_id, msg)
                u.record(session, "bank_asked", {"intervention_id": intervention.id, "reason": reason,
                                                 "trigger": pause.trigger})
                try:
                    resume(u, session_id, BANK_AUTHOR)
                except Conflict as exc:
                    raise _NotDelivered(str(exc)) from exc
                return intervention.id or 0

            asked = asker.ask_if_due(u.db, pause, eval_index=session.evaluations, leader=session.leader_speedup,
                                     deliver=deliver, commit=False)
            return 0.0 if asked is not None else None
    except _NotDelivered as exc:
        log.info("session %s: the bank did not ask (%s)", session_id, exc)
        return None


async def wait_while_paused(ctx: ServerContext, session_id: int, wake: asyncio.Event,
                            asker: AutoAsker | None = None) -> None:
    """What a paused runner does instead of waiting for a person only: wait for a wake-up, but
    if the session's auto-ask policy comes due first, let the bank ask (which resumes it)."""
    asker = asker or AutoAsker()
    while True:
        delay = auto_ask_step(ctx, session_id, asker)
        if delay is None:
            await wake.wait()
            return
        if delay <= 0:
            return
        try:
            await asyncio.wait_for(wake.wait(), timeout=delay)
            return
        except TimeoutError:
            continue
