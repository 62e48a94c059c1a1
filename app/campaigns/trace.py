"""A whole campaign as one JSON Lines file (docs/trace.md, "Campaign traces"): a header, the
campaign, its members, each member's session trace line by line (the session trace format,
unchanged, wrapped), the board and the mutations. Sessions are named by member index and
candidates by (member index, number), so the file is independent of any database's ids.
Importing creates read-only sessions (app/audit/trace_io.py) and a read-only campaign, which the
audit and the campaign page show; exporting it again writes the same bytes."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.types import TypeDecorator
from sqlmodel import Session, SQLModel, col, select

from app.audit.trace_io import TraceAlreadyImported, TraceFormatError, earlier_import, export_session, import_trace
from app.campaigns.create import get_campaign
from app.campaigns.models import BoardEntry, Campaign, CampaignMember, Mutation
from app.limits import MAX_DEPTH, LimitError, parse_json
from app.models import Candidate

FORMAT = "socratic-campaign"
VERSION = 1
CAMPAIGN_DROP = {"id", "read_only", "leader_session_id", "leader_candidate_id"}
MEMBER_DROP = {"id", "campaign_id", "session_id"}
BOARD_DROP = {"id", "campaign_id", "session_id", "candidate_id"}
MUTATION_DROP = {"id", "campaign_id", "session_id", "parent_candidate_id", "child_candidate_id", "intervention_id"}


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n"


def _is_datetime(model: type[SQLModel], name: str) -> bool:
    kind: Any = model.__table__.columns[name].type  # type: ignore[attr-defined]
    if isinstance(kind, TypeDecorator):
        kind = kind.impl_instance
    return isinstance(kind, DateTime)


def _fields(row: SQLModel, drop: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in row.__table__.columns:  # type: ignore[attr-defined]
        if column.key in drop:
            continue
        value = getattr(row, column.key)
        if isinstance(value, dt.datetime):
            value = (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat()
        out[column.key] = value
    return out


def _values(model: type[SQLModel], record: dict[str, Any], drop: set[str], skip: tuple[str, ...]) -> dict[str, Any]:
    names = {c.key for c in model.__table__.columns} - drop  # type: ignore[attr-defined]
    out = {}
    for name in names:
        if name not in record:
            raise TraceFormatError(f"a {record.get('type')} record lacks {name!r}")
        value = record[name]
        if value is not None and _is_datetime(model, name):
            value = dt.datetime.fromisoformat(value)
        out[name] = value
    unknown = set(record) - names - {"type", *skip}
    if unknown:
        raise TraceFormatError(f"a {record.get('type')} record has unknown fields {sorted(unknown)}")
    return out


def export_campaign(db: Session, campaign_id: int) -> str:
    c = get_campaign(db, campaign_id)
    members = list(db.exec(select(CampaignMember).where(CampaignMember.campaign_id == campaign_id)
                           .order_by(col(CampaignMember.id))).all())
    index = {m.session_id: k for k, m in enumerate(members)}
    cands = {x.id: x for x in db.exec(select(Candidate).where(col(Candidate.session_id).in_(list(index)))).all()}

    def ref(candidate_id: int | None) -> list[int] | None:
        x = cands.get(candidate_id) if candidate_id is not None else None
        return [index[x.session_id], x.number] if x is not None else None

    board = list(db.exec(select(BoardEntry).where(BoardEntry.campaign_id == campaign_id)
                         .order_by(col(BoardEntry.id))).all())
    mutations = list(db.exec(select(Mutation).where(Mutation.campaign_id == campaign_id)
                             .order_by(col(Mutation.id))).all())
    traces = [export_session(db, m.session_id).splitlines() for m in members]
    out = [_line({"type": "header", "format": FORMAT, "version": VERSION, "members": len(members),
                  "board": len(board), "mutations": len(mutations)}),
           _line({"type": "campaign", **_fields(c, CAMPAIGN_DROP), "leader": ref(c.leader_candidate_id)})]
    for k, m in enumerate(members):
        out.append(_line({"type": "member", "index": k, **_fields(m, MEMBER_DROP), "lines": len(traces[k])}))
    for k, lines in enumerate(traces):
        out.extend(_line({"type": "session_line", "member": k, "line": line}) for line in lines)
    for e in board:
        out.append(_line({"type": "board", "member": index[e.session_id], **_fields(e, BOARD_DROP)}))
    for mu in mutations:
        out.append(_line({"type": "mutation", "member": index[mu.session_id], **_fields(mu, MUTATION_DROP),
                          "parent": ref(mu.parent_candidate_id), "child": ref(mu.child_candidate_id)}))
    return "".join(out)


def _records(text: str) -> list[dict[str, Any]]:
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = parse_json(raw, f"line {n}", max_bytes=len(raw) + 1, max_depth=MAX_DEPTH + 2, finite=False)
        except LimitError as exc:  # not JSON, nested too deep, NaN, NUL: refused like a session trace
            raise TraceFormatError(str(exc)) from exc
        if not isinstance(record, dict) or "type" not in record:
            raise TraceFormatError(f"line {n}: a record is a JSON object with a type")
        out.append(record)
    if not out or out[0].get("type") != "header" or out[0].get("format") != FORMAT:
        raise TraceFormatError(f"line 1: not a campaign trace (expected a {FORMAT} header)")
    if out[0].get("version") != VERSION:
        raise TraceFormatError(f"line 1: campaign trace version {out[0].get('version')!r}; this server reads "
                               f"{VERSION}")
    return out


CAMPAIGN_TRACE_FACTOR = 8  # a campaign trace holds several sessions' traces


def campaign_trace_limit(trace_max_bytes: int) -> int:
    """The largest campaign trace imported: 8x SOCRATIC_TRACE_MAX_BYTES (docs/campaigns.md)."""
    return trace_max_bytes * CAMPAIGN_TRACE_FACTOR


def import_campaign(db: Session, text: str, file_name: str = "") -> Campaign:
    """A read-only campaign (and read-only member sessions) from a campaign trace. The caller commits."""
    records = _records(text)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in records[1:]:
        by_type.setdefault(str(r["type"]), []).append(r)
    [head] = by_type.get("campaign", [None]) or [None]
    if head is None:
        raise TraceFormatError("the file has no campaign record")
    members = sorted(by_type.get("member", []), key=lambda r: r["index"])
    lines: dict[int, list[str]] = {k: [] for k in range(len(members))}
    for r in by_type.get("session_line", []):
        if r.get("member") not in lines:
            raise TraceFormatError(f"a session line names member {r.get('member')!r}, which is not in the file")
        lines[r["member"]].append(str(r["line"]))
    texts = ["\n".join(lines[k]) + "\n" for k in range(len(members))]
    for text in texts:  # the same campaign twice would make its sessions twice: say so instead
        earlier = earlier_import(db, text)
        if earlier is not None:
            raise TraceAlreadyImported(*earlier)
    sessions = [import_trace(db, text, f"{file_name}#member{k}") for k, text in enumerate(texts)]
    numbers: dict[tuple[int, int], int] = {}
    for k, s in enumerate(sessions):
        for x in db.exec(select(Candidate).where(Candidate.session_id == s.id)).all():
            numbers[(k, x.number)] = x.id or 0

    def resolve(pair: Any) -> int | None:
        if pair is None:
            return None
        try:
            return numbers[(int(pair[0]), int(pair[1]))]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise TraceFormatError(f"no candidate {pair!r} in the file") from exc

    campaign = Campaign(**_values(Campaign, head, CAMPAIGN_DROP, ("leader",)), read_only=True)
    campaign.leader_candidate_id = resolve(head.get("leader"))
    campaign.leader_session_id = sessions[head["leader"][0]].id if head.get("leader") else None
    db.add(campaign)
    db.flush()
    cid = campaign.id or 0
    for k, r in enumerate(members):
        db.add(CampaignMember(**_values(CampaignMember, r, MEMBER_DROP, ("index", "lines")), campaign_id=cid,
                              session_id=sessions[k].id or 0))
    for r in by_type.get("board", []):
        k = int(r["member"])
        db.add(BoardEntry(**_values(BoardEntry, r, BOARD_DROP, ("member",)), campaign_id=cid,
                          session_id=sessions[k].id or 0, candidate_id=resolve([k, r["candidate_number"]])))
    for r in by_type.get("mutation", []):
        k = int(r["member"])
        db.add(Mutation(**_values(Mutation, r, MUTATION_DROP, ("member", "parent", "child")), campaign_id=cid,
                        session_id=sessions[k].id or 0, parent_candidate_id=resolve(r.get("parent")),
                        child_candidate_id=resolve(r.get("child"))))
    db.flush()
    return campaign
