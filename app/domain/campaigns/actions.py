"""Actions over a whole campaign: start, pause, resume or stop every member at once (the
pause/question machinery per campaign; each member still pauses and is steered on its own)."""

from __future__ import annotations

from collections.abc import Callable

from app.domain.campaigns.members import get_campaign, member_session_ids
from app.domain.lifecycle import FINAL_STATES
from app.domain.sessions import Conflict, get_session, pause, resume, start, stop
from app.store.events import Unit
from app.store.models import CREATED, INTERRUPTED, PAUSED, RUNNING

ACTIONS = ("start", "pause", "resume", "stop")


def act_on_campaign(unit: Unit, campaign_id: int, action: str, author: str) -> list[int]:
    """Apply `action` to every member it applies to; returns the sessions it changed."""
    campaign = get_campaign(unit.db, campaign_id)
    if campaign.read_only:
        raise Conflict(f"campaign {campaign_id} was imported from a trace: it is audited, not run")
    wanted: dict[str, tuple[tuple[str, ...], Callable[[int], object]]] = {
        "start": ((CREATED,), lambda sid: start(unit, sid)),
        "pause": ((RUNNING,), lambda sid: pause(unit, sid, author, "the whole campaign was paused")),
        "resume": ((PAUSED, INTERRUPTED), lambda sid: resume(unit, sid, author)),
        "stop": ((CREATED, RUNNING, PAUSED, INTERRUPTED), lambda sid: stop(unit, sid, author, "campaign stopped")),
    }
    if action not in wanted:
        raise Conflict(f"unknown campaign action {action!r}; one of {', '.join(ACTIONS)}")
    states, run = wanted[action]
    changed = []
    for sid in member_session_ids(unit.db, campaign_id):
        status = get_session(unit.db, sid).status
        if status in states and status not in FINAL_STATES:
            run(sid)
            changed.append(sid)
    return changed
