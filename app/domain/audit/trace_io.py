"""Export a session as a trace file and import one back, losing nothing (docs/trace.md).

A trace is JSON Lines, ASCII only, one record per line, in a fixed order: a header, the
session, the baseline kernel, candidates (by number), evaluations, triggers, interventions,
events (by seq). Rows carry every column of their table except the ones implied by the file
(session_id) or local to a database (read_only); ids are the ids of the trace. Importing
creates a new read-only session and remembers the trace's ids (TraceImport), so exporting the
imported session writes the same bytes again."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import lzma
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import JSON, Column, DateTime
from sqlalchemy.types import TypeDecorator
from sqlmodel import Session, SQLModel, select

from app.domain.audit.evidence import replay_evidence
from app.domain.audit.record import AuditRecord, load_record
from app.domain.lifecycle import TRANSITIONS
from app.domain.schemas import BudgetIn, ScenarioIn, SessionUpdate, ThresholdsIn
from app.domain.steering.goal import GOAL_METRICS
from app.store.input_limits import (
    MAX_DEPTH,
    LimitError,
    check_int,
    check_json_value,
    check_magnitude,
    check_speedup,
    check_speedups_in,
    check_text,
    human_bytes,
    parse_json,
)
from app.store.models import (
    CUDA,
    PYTHON_CPU,
    Candidate,
    Evaluation,
    Event,
    Intervention,
    SteeringSession,
    Trigger,
    utcnow,
)
from app.store.trace_models import ID_KINDS, TraceImport
from question_bank.store import ensure_starter_bank

FORMAT = "socratic-trace"
VERSION = 1  # bump when a record changes meaning; docs/trace.md keeps the history


@dataclass(frozen=True)
class RowSpec:
    """How one table appears in a trace."""

    name: str  # the record's "type"
    model: type[SQLModel]
    drop: frozenset[str]  # columns not written: implied by the file or local to one database
    refs: dict[str, str]  # column -> kind of row its value points to (a trace id in the file)


SESSION = RowSpec("session", SteeringSession, frozenset({"read_only"}),
                  {"id": "session", "leader_id": "candidate", "open_trigger_id": "trigger"})
CANDIDATE = RowSpec("candidate", Candidate, frozenset({"session_id"}), {"id": "candidate", "parent_id": "candidate"})
EVALUATION = RowSpec("evaluation", Evaluation, frozenset(), {"id": "evaluation", "candidate_id": "candidate"})
TRIGGER = RowSpec("trigger", Trigger, frozenset({"session_id"}), {"id": "trigger"})
INTERVENTION = RowSpec("intervention", Intervention, frozenset({"session_id"}),
                       {"id": "intervention", "trigger_id": "trigger"})
EVENT = RowSpec("event", Event, frozenset({"id", "session_id"}), {})
ROW_SPECS = {s.name: s for s in (SESSION, CANDIDATE, EVALUATION, TRIGGER, INTERVENTION, EVENT)}
# The order of records in a file; the header and the baseline come first, one each.
RECORD_ORDER = ("header", "session", "baseline", "candidate", "evaluation", "trigger", "intervention", "event")
COUNTED = ("candidate", "evaluation", "trigger", "intervention", "event")
RowT = TypeVar("RowT", Evaluation, Trigger, Intervention)
# Draws every page of an imported session in the import's transaction (the web face's
# app/faces/web/page_check.py); raises to refuse the file.
PageCheck = Callable[[Session, SteeringSession], None]


class TraceFormatError(ValueError):
    """The file is not a trace this version can import; the message names the line."""


# -- columns -------------------------------------------------------------------------------


def _columns(model: type[SQLModel]) -> list[Column[Any]]:
    return list(model.__table__.columns)  # type: ignore[attr-defined]


def _is_datetime(column: Column[Any]) -> bool:
    kind: Any = column.type
    if isinstance(kind, TypeDecorator):
        kind = kind.impl_instance
    return isinstance(kind, DateTime)


def _encode(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # SQLite returns naive UTC for plain DateTime columns
            value = value.replace(tzinfo=dt.UTC)
        return value.isoformat()
    return value


def _line(record: dict[str, Any]) -> str:
    # ASCII: no encoding questions, and no U+2028 that a line splitter could take for a newline.
    return json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n"


# -- export --------------------------------------------------------------------------------


def _row(spec: RowSpec, row: SQLModel, record: AuditRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"type": spec.name}
    for column in _columns(spec.model):
        name = column.key
        if name in spec.drop:
            continue
        value = getattr(row, name)
        if name in spec.refs:
            value = record.trace_id(spec.refs[name], value)
        out[name] = _encode(value)
    return out


def _in_trace_order(record: AuditRecord, kind: str, rows: Sequence[RowT]) -> list[RowT]:
    return sorted(rows, key=lambda row: record.trace_id(kind, row.id) or 0)


def export_lines(record: AuditRecord) -> Iterator[str]:
    """The trace of one session, line by line."""
    evaluations = _in_trace_order(record, "evaluation", record.evaluations)
    triggers = _in_trace_order(record, "trigger", record.triggers)
    interventions = _in_trace_order(record, "intervention", record.interventions)
    counts = {"candidate": len(record.candidates), "evaluation": len(evaluations), "trigger": len(triggers),
              "intervention": len(interventions), "event": len(record.events)}
    yield _line({"type": "header", "format": FORMAT, "version": VERSION,
                 "session": record.trace_id("session", record.session_id), "counts": counts})
    yield _line(_row(SESSION, record.session, record))
    yield _line({"type": "baseline", "source": record.baseline_source})
    for c in record.candidates:
        yield _line(_row(CANDIDATE, c, record))
    for e in evaluations:
        yield _line(_row(EVALUATION, e, record))
    for t in triggers:
        yield _line(_row(TRIGGER, t, record))
    for i in interventions:
        yield _line(_row(INTERVENTION, i, record))
    for ev in record.events:
        yield _line(_row(EVENT, ev, record))


def export_session(db: Session, session_id: int) -> str:
    """The whole trace of a session as text (raises app.domain.sessions.NotFound)."""
    return "".join(export_lines(load_record(db, session_id)))


# -- parsing -------------------------------------------------------------------------------


@dataclass
class ParsedTrace:
    version: int
    session: dict[str, Any]
    baseline_source: str | None
    rows: dict[str, list[tuple[int, dict[str, Any]]]]  # type -> (line number, fields)


def _check_value(spec: RowSpec, column: Column[Any], value: Any, where: str) -> Any:
    name = column.key
    if value is None:
        if not column.nullable and name not in spec.refs:
            raise TraceFormatError(f"{where}: {spec.name}.{name} must not be null")
        return None
    if _is_datetime(column):
        if not isinstance(value, str):
            raise TraceFormatError(f"{where}: {spec.name}.{name} must be an ISO 8601 time")
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError as exc:
            raise TraceFormatError(f"{where}: {spec.name}.{name}: {exc}") from exc
        if moment.tzinfo is None:
            raise TraceFormatError(f"{where}: {spec.name}.{name} must carry its UTC offset")
        return moment
    if isinstance(column.type, JSON):
        return _check_json(spec, name, value, where)
    try:
        python_type = column.type.python_type
    except NotImplementedError:
        return value
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
    }.get(python_type, lambda v: True)
    if not ok(value):
        raise TraceFormatError(f"{where}: {spec.name}.{name} must be {python_type.__name__}, "
                               f"not {type(value).__name__}")
    try:
        if python_type is int:
            check_int(value, f"{spec.name}.{name}")
        elif python_type is float and "speedup" in name:
            check_speedup(float(value), f"{spec.name}.{name}")
        elif python_type is float:
            check_magnitude(float(value), f"{spec.name}.{name}")
        elif python_type is str:
            check_text(value, f"{spec.name}.{name}")
    except LimitError as exc:
        raise TraceFormatError(f"{where}: {exc}") from exc
    return value


def _check_json(spec: RowSpec, name: str, value: Any, where: str) -> Any:
    """A JSON column: within the limits of every input, and of the type its model declares
    (session.thresholds an object, candidate.flags a list of texts, ...)."""
    try:
        check_json_value(value, f"{spec.name}.{name}", finite=False)
        if spec.name != "evaluation":  # a report may say Infinity (max_error); what charts read may not
            check_speedups_in(value, f"{spec.name}.{name}")
    except LimitError as exc:
        raise TraceFormatError(f"{where}: {exc}") from exc
    annotation = spec.model.model_fields[name].annotation
    if annotation is None:
        return value
    try:
        return TypeAdapter(annotation).validate_python(value, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise TraceFormatError(f"{where}: {spec.name}.{name} must be {_type_name(annotation)} "
                               f"({first['msg'].lower()})") from exc


def _type_name(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "")
    return {"dict[str, Any]": "an object", "list[str]": "a list of texts",
            "list[dict[str, Any]] | None": "a list of objects or null"}.get(text, text)


def check_session(fields: dict[str, Any], where: str) -> None:
    """The session record against the API's own rules (app/domain/schemas.py), so that an imported
    session shows like any other: thresholds, budgets, goal, scenarios, kinds."""
    try:
        ThresholdsIn.model_validate({k: v for k, v in fields.get("thresholds", {}).items()
                                     if k in ThresholdsIn.model_fields})
        BudgetIn(steps=fields.get("budget_steps"), tokens=fields.get("budget_tokens"),
                 cost_usd=fields.get("budget_cost_usd"), seconds=fields.get("budget_seconds"))
        for scenario in fields.get("scenarios") or []:
            ScenarioIn.model_validate(scenario)
        if fields.get("goal_target") is not None:
            SessionUpdate(goal_target=fields["goal_target"])
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors())
        raise TraceFormatError(f"{where}: the session's settings are not valid: {problems}") from exc
    checks = (
        ("title", lambda v: isinstance(v, str) and 0 < len(v) <= 200, "a text of 1 to 200 characters"),
        ("goal_metric", lambda v: v in GOAL_METRICS, f"one of {', '.join(GOAL_METRICS)}"),
        ("candidate_kind", lambda v: v in (CUDA, PYTHON_CPU), f"{CUDA} or {PYTHON_CPU}"),
        ("status", lambda v: v in TRANSITIONS, f"one of {', '.join(sorted(TRANSITIONS))}"),
    )
    for name, ok, expected in checks:
        if name in fields and not ok(fields[name]):
            raise TraceFormatError(f"{where}: session.{name} must be {expected}")
    for name in ("used_steps", "used_tokens", "used_cost_usd", "used_seconds", "evaluations", "last_seq"):
        if isinstance(fields.get(name), int | float) and fields[name] < 0:
            raise TraceFormatError(f"{where}: session.{name} must not be negative")


def check_fields(spec: RowSpec, obj: dict[str, Any], where: str, extra: frozenset[str] = frozenset()
                 ) -> dict[str, Any]:
    """A record's columns checked against its table (types, the input limits, finite and bounded
    numbers, JSON columns of their declared type); `extra` names record fields that are not
    columns (checked by the caller). The one check of every trace record, session or campaign."""
    return _fields(spec, obj, where, extra)


def _fields(spec: RowSpec, obj: dict[str, Any], where: str, extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    columns = {c.key: c for c in _columns(spec.model) if c.key not in spec.drop}
    unknown = sorted(set(obj) - set(columns) - {"type"} - extra)
    if unknown:
        raise TraceFormatError(f"{where}: unknown {spec.name} field(s) {', '.join(unknown)} "
                               f"(written by a newer Socratic?)")
    out: dict[str, Any] = {}
    for name, column in columns.items():
        if name not in obj:
            field = spec.model.model_fields.get(name)
            if (field is None or field.is_required()) and not column.nullable:
                raise TraceFormatError(f"{where}: the {spec.name} lacks the field {name!r}")
            continue  # a column added since the file was written: the model's default applies
        out[name] = _check_value(spec, column, obj[name], where)
    if "id" in columns and not isinstance(out.get("id"), int):
        raise TraceFormatError(f"{where}: the {spec.name} needs an integer id")
    return out


def parse_trace(text: str) -> ParsedTrace:
    """Read and check a trace without touching a database."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise TraceFormatError("the file is empty")
    records: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            raise TraceFormatError(f"line {number}: empty line")
        try:
            # Infinity is allowed inside reports (the harness's max_error of a NaN output);
            # typed number columns are checked for finite values one by one below.
            obj = parse_json(raw, f"line {number}", max_bytes=len(raw) + 1, max_depth=MAX_DEPTH + 2, finite=False)
        except LimitError as exc:
            raise TraceFormatError(str(exc)) from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise TraceFormatError(f"line {number}: each line is a JSON object with a \"type\"")
        records.append((number, obj))

    header = records[0][1]
    if header.get("type") != "header" or header.get("format") != FORMAT:
        raise TraceFormatError(f"line 1: not a Socratic trace (the first line must be its header, "
                               f"format {FORMAT!r})")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TraceFormatError("line 1: the header's version must be a positive integer")
    if version > VERSION:
        raise TraceFormatError(f"line 1: this trace uses format version {version}; this Socratic reads "
                               f"versions up to {VERSION}")

    rows: dict[str, list[tuple[int, dict[str, Any]]]] = {t: [] for t in ROW_SPECS}
    baseline: list[tuple[int, dict[str, Any]]] = []
    position = 0
    for number, obj in records[1:]:
        kind = obj["type"]
        if kind not in RECORD_ORDER or kind == "header":
            raise TraceFormatError(f"line {number}: unknown record type {kind!r}")
        order = RECORD_ORDER.index(kind)
        if order < position:
            raise TraceFormatError(f"line {number}: a {kind} record after {RECORD_ORDER[position]} records "
                                   f"(the order is {', '.join(RECORD_ORDER)})")
        position = order
        where = f"line {number}"
        if kind == "baseline":
            if set(obj) != {"type", "source"} or not isinstance(obj["source"], str | None):
                raise TraceFormatError(f"{where}: the baseline record is {{\"type\", \"source\"}}, "
                                       "source a string or null")
            if obj["source"] is not None:
                try:
                    check_text(obj["source"], "baseline.source")
                except LimitError as exc:
                    raise TraceFormatError(f"{where}: {exc}") from exc
            baseline.append((number, obj))
            continue
        rows[kind].append((number, _fields(ROW_SPECS[kind], obj, where)))

    if len(rows["session"]) != 1:
        raise TraceFormatError(f"a trace holds exactly one session record, this one {len(rows['session'])}")
    check_session(rows["session"][0][1], f"line {rows['session'][0][0]}")
    if len(baseline) != 1:
        raise TraceFormatError(f"a trace holds exactly one baseline record, this one {len(baseline)}")
    counts = header.get("counts")
    if not isinstance(counts, dict):
        raise TraceFormatError("line 1: the header lacks its record counts")
    for kind in COUNTED:
        if counts.get(kind) != len(rows[kind]):
            raise TraceFormatError(f"the header counts {counts.get(kind)} {kind} records, the file holds "
                                   f"{len(rows[kind])}: it is truncated or was edited")
    if header.get("session") != rows["session"][0][1]["id"]:
        raise TraceFormatError("line 1: the header names another session than the session record")
    _check_references(rows)
    return ParsedTrace(version, rows["session"][0][1], baseline[0][1]["source"], rows)


def candidate_source(text: str, number: int | None = None) -> tuple[int, str, str]:
    """(number, what it is, source) of one candidate of a trace: candidate `number` of the
    session, or its leader when `number` is None. The trace is checked whole first
    (`parse_trace`), so a damaged or edited file is refused, not half read."""
    parsed = parse_trace(text)
    candidates = [fields for _line, fields in parsed.rows["candidate"]]
    leader_id = parsed.session.get("leader_id")
    if number is None:
        found = next((c for c in candidates if c["id"] == leader_id), None)
        if found is None:
            raise TraceFormatError("the session has no leader (no candidate passed): name one with --candidate")
    else:
        found = next((c for c in candidates if c["number"] == number), None)
        if found is None:
            numbers = sorted(c["number"] for c in candidates)
            span = f"#{numbers[0]} to #{numbers[-1]}" if numbers else "none"
            raise TraceFormatError(f"the session has no candidate #{number} (its candidates: {span})")
    if not found.get("source"):
        raise TraceFormatError(f"candidate #{found['number']} has no source in the trace")
    if found["id"] == leader_id:
        label = f"the leader, {parsed.session.get('leader_speedup') or 0:.2f}x baseline"
    else:
        label = f"{found.get('verdict') or 'no verdict'}, {found.get('speedup') or 0:.2f}x baseline"
    return found["number"], label, found["source"]


def _check_references(rows: dict[str, list[tuple[int, dict[str, Any]]]]) -> None:
    ids: dict[str, set[int]] = {}
    for kind in ("candidate", "evaluation", "trigger", "intervention"):
        seen: set[int] = set()
        for number, fields in rows[kind]:
            if fields["id"] in seen:
                raise TraceFormatError(f"line {number}: a second {kind} with id {fields['id']}")
            seen.add(fields["id"])
        ids[kind] = seen
    numbers: set[int] = set()
    for line, fields in rows["candidate"]:
        if fields.get("number") in numbers:
            raise TraceFormatError(f"line {line}: a second candidate #{fields.get('number')}")
        numbers.add(fields.get("number", 0))
    seqs: set[int] = set()
    for line, fields in rows["event"]:
        if fields.get("seq") in seqs:
            raise TraceFormatError(f"line {line}: a second event with seq {fields.get('seq')}")
        seqs.add(fields.get("seq", 0))
    for kind in ("session", "candidate", "evaluation", "intervention"):
        spec = ROW_SPECS[kind]
        for line, fields in rows[kind]:
            for column, target in spec.refs.items():
                if column == "id" or fields.get(column) is None:
                    continue
                if fields[column] not in ids[target]:
                    raise TraceFormatError(f"line {line}: {kind}.{column} = {fields[column]} names no "
                                           f"{target} of this trace")


# -- import --------------------------------------------------------------------------------


class TraceAlreadyImported(TraceFormatError):
    """The same file (same SHA-256) was imported before: nothing is imported twice."""

    def __init__(self, session_id: int, file_name: str) -> None:
        self.session_id = session_id
        super().__init__(f"this trace was imported before{f' (from {file_name})' if file_name else ''}, as "
                         f"session {session_id}: /sessions/{session_id}/audit; nothing was imported again")


def check_size(size: int, limit: int) -> None:
    """Refuse a trace larger than `limit` bytes (Settings.trace_max_bytes)."""
    if size > limit:
        raise TraceTooLarge(f"the trace is larger than {human_bytes(limit)}: this server imports traces up "
                            f"to {human_bytes(limit)} (SOCRATIC_TRACE_MAX_BYTES)")


class TraceTooLarge(TraceFormatError):
    pass


XZ_MAGIC = b"\xfd7zXZ\x00"
GZIP_MAGIC = b"\x1f\x8b"


def trace_text(data: bytes, limit: int) -> str:
    """The text of a trace file as read or uploaded (at most `limit` + 1 bytes of it): JSON
    lines, plain or compressed with xz or gzip (by their magic bytes, whatever the file's name;
    a campaign's trace of a few MB compresses about 30x). Whole and decompressed, it must stay
    within `limit` bytes; decompression stops one byte past that, so a small bomb costs little.
    Raises TraceTooLarge or TraceFormatError with a message for the person importing."""
    check_size(len(data), limit)
    decompressor: Any = None
    if data.startswith(XZ_MAGIC):
        decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    elif data.startswith(GZIP_MAGIC):
        decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    if decompressor is not None:
        try:
            data = decompressor.decompress(data, limit + 1)
        except (lzma.LZMAError, zlib.error, EOFError) as exc:
            raise TraceFormatError(f"the compressed trace is damaged: {exc}") from exc
        check_size(len(data), limit)
        if not decompressor.eof:
            raise TraceFormatError("the compressed trace is cut short")
        if decompressor.unused_data:
            raise TraceFormatError("the compressed trace has bytes after its end (a second stream, or "
                                   "something appended): compress one trace per file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError("the file is not UTF-8 text") from exc


def trace_bytes(text: str, file_name: str) -> bytes:
    """An exported trace as written to `file_name`: xz-compressed when the name ends in .xz,
    gzip when it ends in .gz, else the JSON lines themselves."""
    data = text.encode("ascii")
    if file_name.endswith(".xz"):
        return lzma.compress(data, format=lzma.FORMAT_XZ, preset=9)
    if file_name.endswith(".gz"):
        return zlib.compress(data, 9, wbits=zlib.MAX_WBITS | 16)
    return data


def import_trace_once(db: Session, text: str, file_name: str = "", pages: PageCheck | None = None
                      ) -> SteeringSession:
    """import_trace, unless a trace with the same bytes is already in this database
    (TraceAlreadyImported names its session). What the import page and the CLI call."""
    earlier = earlier_import(db, text)
    if earlier is not None:
        raise TraceAlreadyImported(*earlier)
    return import_trace(db, text, file_name, pages)


def earlier_import(db: Session, text: str) -> tuple[int, str] | None:
    """(session id, file name) of a trace with the same bytes already imported here, or None."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    earlier = db.exec(select(TraceImport).where(TraceImport.file_sha256 == digest)).first()
    if earlier is not None and db.get(SteeringSession, earlier.session_id) is not None:
        return earlier.session_id, earlier.file_name
    return None


def check_shows(db: Session, session: SteeringSession, pages: PageCheck | None = None) -> None:
    """Build what the listing and the audit pages build from the imported rows (still in the
    caller's transaction), and draw every page with `pages`; any failure refuses the trace
    instead of breaking a page later."""
    from app.domain.audit.summary import audit_summary
    from app.domain.audit.timeline import timeline
    from app.domain.schemas import CandidatePublic, SessionPublic
    from app.domain.sessions import candidates_of, public_candidate, public_session

    try:
        SessionPublic.model_validate(public_session(db, session))
        for c in candidates_of(db, session.id or 0):
            CandidatePublic.model_validate(public_candidate(db, c))
        record = load_record(db, session.id or 0)
        audit_summary(record)
        timeline(record)
        if pages is not None:
            pages(db, session)
    except TraceFormatError:
        raise
    except Exception as exc:  # a shape no page can show: say what, store nothing
        raise TraceFormatError(f"the trace is well-formed but its content cannot be shown "
                               f"({type(exc).__name__}: {exc}); nothing was imported") from exc


def import_trace(db: Session, text: str, file_name: str = "", pages: PageCheck | None = None) -> SteeringSession:
    """Create a read-only session from a trace. The caller commits. `pages` draws every page of
    it before it is kept (the server and the CLI pass app/faces/web/page_check.session_pages)."""
    parsed = parse_trace(text)
    ensure_starter_bank(db)  # commits once, on a database's first use: its questions are matched by text
    id_map: dict[str, dict[str, int]] = {kind: {} for kind in ID_KINDS}

    fields = dict(parsed.session)
    trace_session = fields.pop("id")
    leader, open_trigger = fields.pop("leader_id", None), fields.pop("open_trigger_id", None)
    session = SteeringSession(**fields, read_only=True)
    db.add(session)
    db.flush()
    sid = session.id or 0
    id_map["session"][str(trace_session)] = sid

    def add_rows(kind: str, model: type[SQLModel], later: tuple[str, ...] = (), **fixed: Any) -> list[Any]:
        made: list[tuple[dict[str, Any], Any]] = []
        for _line_no, row_fields in parsed.rows[kind]:
            values = {k: v for k, v in row_fields.items() if k != "id" and k not in later}
            for column, target in ROW_SPECS[kind].refs.items():
                if column != "id" and column not in later and values.get(column) is not None:
                    values[column] = id_map[target][str(values[column])]
            row = model(**values, **fixed)
            db.add(row)
            made.append((row_fields, row))
        db.flush()
        for row_fields, row in made:
            id_map[kind][str(row_fields["id"])] = row.id
        return made

    # Parents may come after their children in a hand-edited file: link them once all exist.
    for row_fields, row in add_rows("candidate", Candidate, later=("parent_id",), session_id=sid):
        if row_fields.get("parent_id") is not None:
            row.parent_id = id_map["candidate"][str(row_fields["parent_id"])]
    add_rows("evaluation", Evaluation)
    triggers = {row.id: row for _f, row in add_rows("trigger", Trigger, session_id=sid)}
    messages = {int(f["id"]): row for f, row in add_rows("intervention", Intervention, session_id=sid)}
    events = [Event(session_id=sid, **row_fields) for _line_no, row_fields in parsed.rows["event"]]
    db.add_all(events)
    session.leader_id = id_map["candidate"][str(leader)] if leader is not None else None
    session.open_trigger_id = id_map["trigger"][str(open_trigger)] if open_trigger is not None else None
    db.add(session)
    db.add(TraceImport(session_id=sid, format_version=parsed.version, file_name=file_name,
                       file_sha256=hashlib.sha256(text.encode()).hexdigest(), imported_at=utcnow(),
                       baseline_source=parsed.baseline_source, ids=id_map))
    db.flush()
    replay_evidence(db, session, events, messages, triggers)  # the bank counts imported sessions too
    check_shows(db, session, pages)
    return session
