"""A whole campaign as one JSON Lines file (docs/trace.md, "Campaign traces"): a header, the
campaign, its members, each member's session trace line by line (the session trace format,
unchanged, wrapped), the board and the mutations. Sessions are named by member index and
candidates by (member index, number), so the file is independent of any database's ids.
Importing creates read-only sessions (app/domain/audit/trace_io.py) and a read-only campaign, which the
audit and the campaign page show; exporting it again writes the same bytes."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, SQLModel, col, select

from app.domain.audit.trace_io import (
    PageCheck,
    RowSpec,
    TraceAlreadyImported,
    TraceFormatError,
    check_fields,
    earlier_import,
    export_session,
    import_trace,
)
from app.domain.campaigns.members import get_campaign
from app.domain.steering.goal import GOAL_METRICS
from app.store.campaign_models import (
    ACTIVE,
    FINISHED,
    MODES,
    BoardEntry,
    Campaign,
    CampaignMember,
    Mutation,
)
from app.store.input_limits import MAX_DEPTH, LimitError, parse_json
from app.store.models import Candidate

FORMAT = "socratic-campaign"
VERSION = 1


@dataclass(frozen=True)
class RecordSchema:
    """One record type of a campaign trace: its table's columns (a RowSpec, checked by the same
    code as a session trace's rows) and the fields it adds. Export writes, and import reads,
    exactly these."""

    spec: RowSpec
    extra: frozenset[str]


CAMPAIGN = RecordSchema(RowSpec("campaign", Campaign,
                                frozenset({"id", "read_only", "leader_session_id", "leader_candidate_id"}), {}),
                        frozenset({"leader"}))
MEMBER = RecordSchema(RowSpec("member", CampaignMember, frozenset({"id", "campaign_id", "session_id"}), {}),
                      frozenset({"index", "lines"}))
BOARD = RecordSchema(RowSpec("board", BoardEntry, frozenset({"id", "campaign_id", "session_id", "candidate_id"}),
                             {}), frozenset({"member"}))
MUTATION = RecordSchema(RowSpec("mutation", Mutation, frozenset({"id", "campaign_id", "session_id",
                                                                 "parent_candidate_id", "child_candidate_id",
                                                                 "intervention_id"}), {}),
                        frozenset({"member", "parent", "child"}))
# The order of records in a file, after the header.
RECORD_ORDER = ("campaign", "member", "session_line", "board", "mutation")
CampaignCheck = Callable[[Session, Campaign], None]


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n"


def _fields(row: SQLModel, schema: RecordSchema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in row.__table__.columns:  # type: ignore[attr-defined]
        if column.key in schema.spec.drop:
            continue
        value = getattr(row, column.key)
        if isinstance(value, dt.datetime):
            value = (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat()
        out[column.key] = value
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
           _line({"type": "campaign", **_fields(c, CAMPAIGN), "leader": ref(c.leader_candidate_id)})]
    for k, m in enumerate(members):
        out.append(_line({"type": "member", "index": k, **_fields(m, MEMBER), "lines": len(traces[k])}))
    for k, lines in enumerate(traces):
        out.extend(_line({"type": "session_line", "member": k, "line": line}) for line in lines)
    for e in board:
        out.append(_line({"type": "board", "member": index[e.session_id], **_fields(e, BOARD)}))
    for mu in mutations:
        out.append(_line({"type": "mutation", "member": index[mu.session_id], **_fields(mu, MUTATION),
                          "parent": ref(mu.parent_candidate_id), "child": ref(mu.child_candidate_id)}))
    return "".join(out)


# -- import -----------------------------------------------------------------------------------


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass
class ParsedCampaign:
    campaign: dict[str, Any]
    leader: tuple[int, int] | None
    members: list[dict[str, Any]]  # by index
    texts: list[str]  # each member's session trace
    board: list[tuple[int, int, dict[str, Any]]]  # (line, member, fields)
    mutations: list[tuple[int, int, dict[str, Any], tuple[int, int] | None, tuple[int, int] | None]]


def _pair(value: Any, where: str, what: str, members: int) -> tuple[int, int] | None:
    """A candidate named as [member index, number], or null."""
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2 or not all(_count(v) for v in value)
            or value[0] >= members):
        raise TraceFormatError(f"{where}: {what} names a candidate as [member index, number] with a member "
                               f"of this file (0 to {members - 1}), or null; not {value!r}")
    return value[0], value[1]


def _member(value: Any, where: str, members: int) -> int:
    if not _count(value) or value >= members:
        raise TraceFormatError(f"{where}: member must be an index of this file's members (0 to {members - 1}), "
                               f"not {value!r}")
    return int(value)


def _check_campaign(fields: dict[str, Any], where: str) -> None:
    """The campaign record against the rules a campaign made on this server keeps."""
    checks = (
        ("title", lambda v: isinstance(v, str) and 0 < len(v) <= 200, "a text of 1 to 200 characters"),
        ("mode", lambda v: v in MODES, f"one of {', '.join(MODES)}"),
        ("status", lambda v: v in (ACTIVE, FINISHED), f"{ACTIVE} or {FINISHED}"),
        ("goal_metric", lambda v: v in GOAL_METRICS, f"one of {', '.join(GOAL_METRICS)}"),
        ("goal_target", lambda v: v is None or v > 0, "a positive number or null"),
        ("budget_evaluations", lambda v: v is None or v >= 1, "a positive number or null"),
        ("memory_k", lambda v: v is None or v >= 1, "a positive number or null"),
        ("plateau_window", lambda v: v >= 1, "at least 1"),
        ("islands", lambda v: 1 <= v <= 16, "from 1 to 16"),
        ("evaluations", lambda v: v >= 0, "not negative"),
        ("last_leader_at", lambda v: v >= 0, "not negative"),
    )
    for name, ok, expected in checks:
        if name in fields and not ok(fields[name]):
            raise TraceFormatError(f"{where}: campaign.{name} must be {expected}")


def parse_campaign(text: str) -> ParsedCampaign:
    """Read and check a campaign trace without touching a database: every record against its
    schema (the same checks, limits and messages as a session trace), the header's counts,
    member indexes and the candidates records name."""
    records: list[tuple[int, dict[str, Any]]] = []
    for n, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        try:
            record = parse_json(raw, f"line {n}", max_bytes=len(raw) + 1, max_depth=MAX_DEPTH + 2, finite=False)
        except LimitError as exc:  # not JSON, nested too deep, NaN, NUL: refused like a session trace
            raise TraceFormatError(str(exc)) from exc
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise TraceFormatError(f"line {n}: each line is a JSON object with a \"type\"")
        records.append((n, record))
    if not records or records[0][1].get("type") != "header" or records[0][1].get("format") != FORMAT:
        raise TraceFormatError(f"line 1: not a campaign trace (expected a {FORMAT} header)")
    header = records[0][1]
    if header.get("version") != VERSION:
        raise TraceFormatError(f"line 1: campaign trace version {header.get('version')!r}; this server reads "
                               f"{VERSION}")
    for name in ("members", "board", "mutations"):
        if not _count(header.get(name)):
            raise TraceFormatError(f"line 1: the header's {name} must be a count (a whole number, 0 or more)")
    if header["members"] < 1:
        raise TraceFormatError("line 1: a campaign has at least one member")
    by_type: dict[str, list[tuple[int, dict[str, Any]]]] = {t: [] for t in RECORD_ORDER}
    position = 0
    for n, record in records[1:]:
        kind = record["type"]
        if kind not in RECORD_ORDER:
            raise TraceFormatError(f"line {n}: unknown record type {kind!r}")
        if RECORD_ORDER.index(kind) < position:
            raise TraceFormatError(f"line {n}: a {kind} record after {RECORD_ORDER[position]} records "
                                   f"(the order is header, {', '.join(RECORD_ORDER)})")
        position = RECORD_ORDER.index(kind)
        by_type[kind].append((n, record))
    for kind, counted in (("member", "members"), ("board", "board"), ("mutation", "mutations")):
        if len(by_type[kind]) != header[counted]:
            raise TraceFormatError(f"the header counts {header[counted]} {kind} records, the file holds "
                                   f"{len(by_type[kind])}: it is truncated or was edited")
    if len(by_type["campaign"]) != 1:
        raise TraceFormatError(f"a campaign trace holds exactly one campaign record, this one "
                               f"{len(by_type['campaign'])}")
    size = header["members"]
    n, head = by_type["campaign"][0]
    campaign = check_fields(CAMPAIGN.spec, head, f"line {n}", CAMPAIGN.extra)
    _check_campaign(campaign, f"line {n}")
    leader = _pair(head.get("leader"), f"line {n}", "campaign.leader", size)

    members: list[dict[str, Any] | None] = [None] * size
    lines_expected: list[int] = [0] * size
    for n, r in by_type["member"]:
        index = r.get("index")
        if not isinstance(index, int) or not _count(index) or index >= size or members[index] is not None:
            raise TraceFormatError(f"line {n}: member.index must be 0 to {size - 1}, each once; not {index!r}")
        if not _count(r.get("lines")):
            raise TraceFormatError(f"line {n}: member.lines must be a count of its session's lines")
        members[index] = check_fields(MEMBER.spec, r, f"line {n}", MEMBER.extra)
        lines_expected[index] = r["lines"]
    lines: list[list[str]] = [[] for _ in range(size)]
    for n, r in by_type["session_line"]:
        if set(r) != {"type", "member", "line"} or not isinstance(r["line"], str):
            raise TraceFormatError(f"line {n}: a session_line record is {{type, member, line}}, line a text")
        lines[_member(r["member"], f"line {n}", size)].append(r["line"])
    for k in range(size):
        if len(lines[k]) != lines_expected[k]:
            raise TraceFormatError(f"member {k}: its record counts {lines_expected[k]} session lines, the file "
                                   f"holds {len(lines[k])}")
    board = []
    for n, r in by_type["board"]:
        k = _member(r.get("member"), f"line {n}", size)
        board.append((n, k, check_fields(BOARD.spec, r, f"line {n}", BOARD.extra)))
    mutations = []
    for n, r in by_type["mutation"]:
        k = _member(r.get("member"), f"line {n}", size)
        fields = check_fields(MUTATION.spec, r, f"line {n}", MUTATION.extra)
        mutations.append((n, k, fields, _pair(r.get("parent"), f"line {n}", "mutation.parent", size),
                          _pair(r.get("child"), f"line {n}", "mutation.child", size)))
    return ParsedCampaign(campaign, leader, [m or {} for m in members],
                          ["\n".join(x) + "\n" for x in lines], board, mutations)


CAMPAIGN_TRACE_FACTOR = 2  # a campaign trace holds several sessions' traces: 64 MiB at the default limit


HEADER_MAX = 65536  # a campaign trace's first line (its header) is far shorter


def is_campaign_trace(text: str) -> bool:
    """Whether a trace file is a campaign's: its first line is a header of FORMAT. Reads that
    line only, so one import form can take session and campaign traces alike."""
    end = text.find("\n", 0, HEADER_MAX)
    first = text[:end] if end >= 0 else text[:HEADER_MAX]
    try:
        header = json.loads(first)
    except ValueError:
        return False
    return isinstance(header, dict) and header.get("type") == "header" and header.get("format") == FORMAT


def campaign_trace_limit(trace_max_bytes: int) -> int:
    """The largest campaign trace imported: 2x SOCRATIC_TRACE_MAX_BYTES (docs/campaigns.md)."""
    return trace_max_bytes * CAMPAIGN_TRACE_FACTOR


def import_campaign(db: Session, text: str, file_name: str = "", pages: PageCheck | None = None,
                    campaign_pages: CampaignCheck | None = None) -> Campaign:
    """A read-only campaign (and read-only member sessions) from a campaign trace. The caller
    commits. `pages` draws each member session's pages and `campaign_pages` the campaign's
    (app/faces/web/page_check.py) before anything is kept."""
    parsed = parse_campaign(text)
    for member_text in parsed.texts:  # the same campaign twice would make its sessions twice: say so instead
        earlier = earlier_import(db, member_text)
        if earlier is not None:
            raise TraceAlreadyImported(*earlier)
    sessions = []
    for k, member_text in enumerate(parsed.texts):
        try:
            sessions.append(import_trace(db, member_text, f"{file_name}#member{k}", pages))
        except TraceAlreadyImported:
            raise
        except TraceFormatError as exc:
            raise TraceFormatError(f"member {k}'s session trace: {exc}") from exc
    numbers: dict[tuple[int, int], int] = {}
    for k, s in enumerate(sessions):
        for x in db.exec(select(Candidate).where(Candidate.session_id == s.id)).all():
            numbers[(k, x.number)] = x.id or 0

    def resolve(pair: tuple[int, int] | None, where: str) -> int | None:
        if pair is None:
            return None
        if pair not in numbers:
            raise TraceFormatError(f"{where}: member {pair[0]}'s session has no candidate #{pair[1]}")
        return numbers[pair]

    campaign = Campaign(**parsed.campaign, read_only=True)
    campaign.leader_candidate_id = resolve(parsed.leader, "the campaign's leader")
    campaign.leader_session_id = sessions[parsed.leader[0]].id if parsed.leader is not None else None
    db.add(campaign)
    db.flush()
    cid = campaign.id or 0
    for k, fields in enumerate(parsed.members):
        db.add(CampaignMember(**fields, campaign_id=cid, session_id=sessions[k].id or 0))
    for n, k, fields in parsed.board:
        number = fields["candidate_number"]
        db.add(BoardEntry(**fields, campaign_id=cid, session_id=sessions[k].id or 0,
                          candidate_id=resolve((k, number), f"line {n}")))
    for n, k, fields, parent, child in parsed.mutations:
        db.add(Mutation(**fields, campaign_id=cid, session_id=sessions[k].id or 0,
                        parent_candidate_id=resolve(parent, f"line {n}"),
                        child_candidate_id=resolve(child, f"line {n}")))
    db.flush()
    if campaign_pages is not None:
        try:
            campaign_pages(db, campaign)
        except TraceFormatError:
            raise
        except Exception as exc:  # a shape no page can show: say what, store nothing
            raise TraceFormatError(f"the campaign trace is well-formed but its content cannot be shown "
                                   f"({type(exc).__name__}: {exc}); nothing was imported") from exc
    return campaign
