"""The bank's evidence as its pages draw it: each use of a message one row (session, the message
without the knob record a campaign's instruction carries, the parent it names, leader before
and after, the gain in x, the evaluations seen), and for an instruction that names a parent's
knobs, the knobs of the candidate that followed it as "knob: a -> b" lines. Never the raw JSON:
a knob record is a line of 2,000 characters that no table can wrap."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, select

from app.domain.campaigns.board import knobs_of_source
from app.store.campaign_models import BoardEntry
from app.store.models import Candidate, Intervention, SteeringSession
from question_bank.evidence import MessageParts, knob_changes, message_parts
from question_bank.models import BankUse, normalize_text

KNOB_LINES = 12  # knob changes listed per use; more are counted


@dataclass(frozen=True)
class UseRow:
    """One use of a message, as the evidence tables show it."""

    used_at: dt.datetime
    session_ref: str
    session_id: int | None        # a session of this database (linked), else None
    author: str
    trigger: str
    message: str                  # the question as sent, "" when it is the row's own question
    parent: str                   # "session 8 candidate #1", or ""
    parent_link: str              # its page, or "" (an imported session's messages number another database's)
    child: str                    # "#2", the candidate that followed, or ""
    child_link: str
    knob_note: str                # what the knob lines compare, or why there are none
    knobs: list[str] = field(default_factory=list)  # "knob: a -> b"
    knobs_more: int = 0           # changes beyond KNOB_LINES
    leader_before: float | None = None
    leader_after: float | None = None
    gain: float | None = None
    evaluations_seen: int = 0
    window: int = 0


ROW_ID_MAX = 2**31 - 1  # the largest id PostgreSQL's INTEGER holds: a larger reference is no row


def _row_id(ref: str | None) -> int | None:
    """A reference kept as text (a bank use's session or message) as a row id, if it can be one."""
    if not ref or not ref.isdigit() or len(ref) > 10:
        return None
    n = int(ref)
    return n if 0 < n <= ROW_ID_MAX else None


def _session_id(ref: str) -> int | None:
    return _row_id(ref)


def _next_candidate(db: Session, session_id: int, ref: str | None) -> Candidate | None:
    """The first candidate the session made after the message reached its agent."""
    item_id = _row_id(ref)
    item = db.get(Intervention, item_id) if item_id is not None else None
    if item is None or item.session_id != session_id:
        return None
    since = item.delivered_at or item.created_at
    return db.exec(select(Candidate).where(Candidate.session_id == session_id, Candidate.created_at >= since)
                   .order_by(col(Candidate.number))).first()


def _child_knobs(db: Session, child: Candidate) -> tuple[dict[str, Any] | None, bool]:
    """(knobs, whole): the child's whole setting when the family renders its source exactly,
    else the knobs its campaign board entry records as changed (whole False), else None."""
    whole = knobs_of_source(child.source)
    if whole is not None:
        return whole, True
    entry = db.exec(select(BoardEntry).where(BoardEntry.candidate_id == child.id)).first()
    if entry is not None and isinstance(entry.knobs, dict) and entry.knobs:
        return dict(entry.knobs), False
    return None, False


def _knob_part(db: Session, parts: MessageParts, session_id: int | None,
               ref: str | None) -> tuple[str, str, str, list[str]]:
    """(child, child link, note, lines) for a message that names a parent's knobs."""
    if parts.knobs is None or session_id is None:
        return "", "", "", []
    child = _next_candidate(db, session_id, ref)
    if child is None:
        return "", "", "no candidate followed it yet", []
    name, link = f"#{child.number}", f"/sessions/{session_id}/candidates/{child.number}"
    knobs, whole = _child_knobs(db, child)
    if knobs is None:
        return name, link, "not a kernel of the family: no knob record to compare", []
    if whole:
        lines = knob_changes(parts.knobs, knobs)
    else:  # the board records only the knobs changed: compare those with the parent's
        lines = knob_changes({k: parts.knobs[k] for k in knobs if k in parts.knobs}, knobs)
    return name, link, "knobs changed from the parent" if lines else "the parent's knobs, unchanged", lines


def use_rows(db: Session, uses: Iterable[BankUse], question: str = "") -> list[UseRow]:
    """The rows of an evidence table for these uses. `question`: the text the table is about
    (a use sent with exactly that text shows no message of its own)."""
    rows = []
    own = normalize_text(question)
    imported: dict[int, bool] = {}
    for u in uses:
        parts = message_parts(u.text)
        sid = _session_id(u.session_ref)
        child, child_link, note, lines = _knob_part(db, parts, sid, u.intervention_ref)
        if sid is not None and sid not in imported:
            s = db.get(SteeringSession, sid)
            imported[sid] = s is None or s.read_only
        parent_link = (f"/sessions/{parts.parent_session}/candidates/{parts.parent_number}"
                       if parts.parent_session is not None and sid is not None and not imported[sid] else "")
        rows.append(UseRow(
            used_at=u.used_at, session_ref=u.session_ref, session_id=sid, author=u.author,
            trigger=(u.trigger or "").replace("_", " "),
            message="" if normalize_text(parts.question) == own else parts.question,
            parent=parts.parent, parent_link=parent_link, child=child, child_link=child_link, knob_note=note,
            knobs=lines[:KNOB_LINES], knobs_more=max(0, len(lines) - KNOB_LINES),
            leader_before=u.leader_before, leader_after=u.leader_after, gain=u.gain,
            evaluations_seen=u.evaluations_seen, window=u.window))
    return rows
