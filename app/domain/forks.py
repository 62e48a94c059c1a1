"""Lineage across sessions, read back from `forked` events (app/engine/fork.py writes them):
`fork_origin` for a fork, `forks_of` for the session it came from."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from app.store.models import Event, SteeringSession

FORKED = "forked"


def fork_origin(events: list[Event]) -> dict[str, Any] | None:
    """The `forked` event's payload of a session that is a fork (its events, by seq)."""
    for e in events[:4]:
        if e.kind == FORKED and isinstance(e.payload, dict):
            return e.payload
    return None


def forks_of(db: Session, session_id: int) -> list[dict[str, Any]]:
    """Sessions forked from this one: [{session, title, from_candidate, author}], oldest first."""
    found = []
    for e in db.exec(select(Event).where(Event.kind == FORKED).order_by(col(Event.id))):
        if isinstance(e.payload, dict) and e.payload.get("from_session") == session_id:
            child = db.get(SteeringSession, e.session_id)
            found.append({"session": e.session_id, "title": child.title if child else "",
                          "from_candidate": e.payload.get("from_candidate"), "author": e.payload.get("author", "")})
    return found
