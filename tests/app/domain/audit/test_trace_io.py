"""Export and import of session traces (docs/trace.md): a round trip that loses nothing,
imported sessions that are read-only, and files that are refused with the line at fault."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
import zlib
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text
from sqlmodel import select

from app.domain.audit.record import load_record
from app.domain.audit.trace_io import (
    VERSION,
    TraceFormatError,
    TraceTooLarge,
    export_session,
    import_trace,
    parse_trace,
    trace_bytes,
    trace_text,
)
from app.domain.schemas import InterventionCreate, SessionUpdate
from app.domain.sessions import (
    Conflict,
    interrupt_running,
    pause,
    resume,
    send_intervention,
    start,
    stop,
    update_session,
)
from app.engine.runner.manager import RunnerManager
from app.faces.commands.cli import main
from app.services.context import ServerContext
from app.services.devices import DeviceQueue
from app.settings import Settings
from app.store.database import Database, alembic_config
from app.store.events import EventHub, Unit
from app.store.input_limits import MAX_KEY, LimitError, check_json_value
from app.store.models import Event, SteeringSession
from app.store.trace_models import TraceImport
from tests.app.domain.audit.conftest import RecordedSession, open_database


def import_text(database: Database, trace: str, name: str = "t.jsonl") -> int:
    with database.session() as db:
        session = import_trace(db, trace, name)
        db.commit()
        return session.id or 0


def export(database: Database, session_id: int) -> str:
    with database.session() as db:
        return export_session(db, session_id)


def test_a_recorded_session_survives_export_and_import_byte_for_byte(
        recorded: RecordedSession, database: Database) -> None:
    # Another session first, so that the imported rows get other ids than the trace's.
    with Unit(database, EventHub()) as u:
        u.db.add(SteeringSession(title="occupies id 1", agent="scripted"))
    first = import_text(database, recorded.trace)
    again = export(database, first)
    assert again == recorded.trace
    second = import_text(database, again)  # and the re-export imports and exports the same again
    assert export(database, second) == recorded.trace

    source = open_database(recorded.db_path)
    with source.session() as db:
        original = load_record(db, recorded.session_id)
    source.dispose()
    with database.session() as db:
        copy = load_record(db, second)
        assert copy.session.read_only and copy.imported and copy.session.id != recorded.session_id
        assert [c.source for c in copy.candidates] == [c.source for c in original.candidates]
        assert [(e.seq, e.kind, e.payload) for e in copy.events] == \
               [(e.seq, e.kind, e.payload) for e in original.events]
        assert [e.report for e in copy.evaluations] == [e.report for e in original.evaluations]
        leader = copy.leader
        assert leader is not None and leader.number == 4
        assert copy.parent_of(leader) is not None
        origin = db.get(TraceImport, second)
        assert origin is not None and origin.format_version == VERSION and origin.file_name == "t.jsonl"
        # Payload ids stay the trace's: they resolve through the import's map.
        created = next(e for e in copy.events if e.kind == "candidate" and e.payload["number"] == 4)
        assert copy.candidate_by_row(copy.row_id("candidate", created.payload["candidate_id"])) is leader


def test_every_line_is_one_ascii_json_record_in_the_documented_order(recorded: RecordedSession) -> None:
    lines = recorded.trace.split("\n")
    assert lines[-1] == "" and recorded.trace.isascii()
    records = [json.loads(line) for line in lines[:-1]]
    order = [r["type"] for r in records]
    assert order[:3] == ["header", "session", "baseline"]
    assert order == sorted(order, key=["header", "session", "baseline", "candidate", "evaluation", "trigger",
                                       "intervention", "event"].index)
    header = records[0]
    assert header["format"] == "socratic-trace" and header["version"] == VERSION
    assert header["counts"]["event"] == order.count("event") > 20
    assert "read_only" not in records[1] and records[2]["source"].startswith("tests.cpu_kernels:")
    assert "<demo>" in records[1]["title"]  # agent- and person-given text is stored verbatim


def test_an_imported_session_is_read_only(recorded: RecordedSession, database: Database) -> None:
    sid = import_text(database, recorded.trace)
    hub = EventHub()
    for action in (lambda u: resume(u, sid, "person"), lambda u: stop(u, sid, "person"),
                   lambda u: send_intervention(u, sid, InterventionCreate(text="Why?")),
                   lambda u: update_session(u, sid, SessionUpdate(title="renamed"))):
        with pytest.raises(Conflict, match="read-only"), Unit(database, hub) as u:
            action(u)
    for action in (lambda u: pause(u, sid, "person"), lambda u: start(u, sid)):
        with pytest.raises(Conflict), Unit(database, hub) as u:  # refused by its state already
            action(u)
    assert export(database, sid) == recorded.trace  # nothing was written


def test_the_runner_refuses_to_resume_an_imported_session(recorded: RecordedSession, tmp_path: Path) -> None:
    running = recorded.trace.replace('"status":"paused"', '"status":"running"', 1)
    database = open_database(tmp_path / "runner.db")
    sid = import_text(database, running)

    async def try_to_run() -> None:
        ctx = ServerContext(Settings(data_dir=tmp_path), database, devices=DeviceQueue(gpu_probe=lambda: False))
        ctx.hub.bind_loop(asyncio.get_running_loop())
        ctx.runners = RunnerManager(ctx)
        assert ctx.runners.recover() == []  # startup recovery leaves it alone
        ctx.runners.ensure_running(sid)
        await ctx.runners.wait_idle(sid, timeout=10)
        await ctx.runners.shutdown()

    asyncio.run(try_to_run())
    with Unit(database, EventHub()) as u:
        assert interrupt_running(u) == []
    assert export(database, sid) == running
    database.dispose()


def refuses(trace: str, match: str) -> None:
    with pytest.raises(TraceFormatError, match=match):
        parse_trace(trace)


def test_broken_files_are_refused_with_the_line_at_fault(recorded: RecordedSession) -> None:
    lines = recorded.trace.split("\n")[:-1]

    def edit(index: int, change: dict[str, object]) -> str:
        changed = list(lines)
        changed[index] = json.dumps({**json.loads(lines[index]), **change})
        return "\n".join(changed) + "\n"

    refuses("", "empty")
    refuses("\n".join(lines[:-1]) + "\n", "truncated")
    refuses("\n".join([*lines[:5], "{not json", *lines[5:]]) + "\n", "line 6: not JSON")
    refuses(edit(0, {"version": VERSION + 1}), f"format version {VERSION + 1}")
    refuses(edit(0, {"format": "something-else"}), "not a Socratic trace")
    refuses(edit(1, {"colour": "blue"}), "line 2: unknown session field")
    refuses(edit(3, {"parent_id": 999}), "line 4: candidate.parent_id = 999 names no candidate")
    refuses(edit(3, {"number": "one"}), "line 4: candidate.number must be int")
    refuses(edit(3, {"created_at": "2026-11-29T10:00:00"}), "UTC offset")
    without = json.loads(lines[3])
    del without["title"]  # the column has a default: a file written before it existed imports
    parse_trace("\n".join([*lines[:3], json.dumps(without), *lines[4:]]) + "\n")
    without = json.loads(lines[3])
    del without["source"]
    refuses("\n".join([*lines[:3], json.dumps(without), *lines[4:]]) + "\n",
            "line 4: the candidate lacks the field 'source'")
    last_event = len(lines) - 1
    refuses(edit(last_event, {"seq": 1}), "a second event with seq 1")
    refuses("\n".join([lines[0], lines[3], lines[1], *lines[2:3], *lines[4:]]) + "\n", "line 3: a session record")


def test_the_cli_exports_to_stdout_and_imports_a_file(recorded: RecordedSession, tmp_path: Path,
                                                      capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(recorded.trace.encode())
    target_db = tmp_path / "cli.db"
    assert main(["trace", "import", str(source), "--db", str(target_db)]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert "as session 1 (read-only)" in out
    assert main(["trace", "export", "1", "--db", str(target_db)]) == 0
    assert capsysbinary.readouterr().out == recorded.trace.encode()
    assert main(["trace", "audit", "1", "--db", str(target_db)]) == 0
    report = capsysbinary.readouterr().out.decode()
    assert "imported" in report and "Q1" in report and "I1" in report and "Churn" in report
    assert main(["trace", "export", "7", "--db", str(target_db)]) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header"}\n')
    assert main(["trace", "import", str(bad), "--db", str(target_db)]) == 1


def test_a_trace_the_server_wrote_imports_with_its_agent_s_long_setting_keys(database: Database) -> None:
    # the H100 run of 2026-12-06: the bank arm's offline agent keyed its record by settings whose slugs
    # passed 200 characters, which import refused though the server had written them
    path = Path(__file__).resolve().parents[4] / "examples" / "agent-v2" / "prefill36-turns-bank.jsonl.xz"
    text = trace_text(path.read_bytes(), 64 * 2**20)
    tried = json.loads(text.splitlines()[1])["runner_state"]["agent"]["tried"]
    assert max(len(k) for k in tried) > 200
    assert import_text(database, text, path.name) > 0
    check_json_value({"k" * MAX_KEY: 1})
    with pytest.raises(LimitError, match="key: longer than"):
        check_json_value({"k" * (MAX_KEY + 1): 1})


def test_a_trace_file_may_be_compressed_and_is_read_within_the_limit(recorded: RecordedSession,
                                                                      tmp_path: Path) -> None:
    text = recorded.trace
    limit = len(text)
    for name in ("t.jsonl", "t.jsonl.xz", "t.jsonl.gz"):
        data = trace_bytes(text, name)
        assert (data == text.encode()) == (name == "t.jsonl")
        assert trace_text(data, limit) == text
    packed = trace_bytes(text, "t.xz")
    assert len(packed) < len(text) // 3
    with pytest.raises(TraceTooLarge):  # the decompressed text counts against the limit
        trace_text(packed, limit - 1)
    # 512 MiB of spaces in about 2 MB, under an 8 MiB limit: refused after decompressing one
    # byte past the limit, never the whole of it.
    squeeze = zlib.compressobj(1, wbits=zlib.MAX_WBITS | 16)
    bomb = b"".join(squeeze.compress(b" " * 2**20) for _ in range(512)) + squeeze.flush()
    assert len(bomb) < 8 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(TraceTooLarge):
            trace_text(bomb, 8 * 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20
    with pytest.raises(TraceFormatError, match="after its end"):  # two streams, or bytes appended
        trace_text(trace_bytes(text, "a.gz") + trace_bytes(text, "b.gz"), 2 * limit)
    with pytest.raises(TraceFormatError, match="after its end"):
        trace_text(packed + b"GARBAGE", limit)
    with pytest.raises(TraceFormatError, match="cut short"):
        trace_text(packed[: len(packed) // 2], limit)
    with pytest.raises(TraceFormatError, match="damaged"):
        trace_text(packed[:12] + bytes(64) + packed[76:], limit)
    with pytest.raises(TraceFormatError, match="UTF-8"):
        trace_text(b"\xff\xfe", limit)
    # The CLI writes and reads them by the same rules.
    target_db = tmp_path / "x.db"
    (tmp_path / "in.jsonl.xz").write_bytes(packed)
    assert main(["trace", "import", str(tmp_path / "in.jsonl.xz"), "--db", str(target_db)]) == 0
    assert main(["trace", "export", "1", "--db", str(target_db), "-o", str(tmp_path / "out.jsonl.gz")]) == 0
    assert trace_text((tmp_path / "out.jsonl.gz").read_bytes(), limit) == text


def test_upgrading_a_database_from_the_first_schema_keeps_its_sessions(tmp_path: Path) -> None:
    """The read_only column is added in place: copying the session table (alembic's batch
    mode) would drop it, and with foreign keys on that cascades to every event."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    database = Database(url)
    with database.engine.begin() as connection:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0001_app")
    with database.engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO session (id, title, problem, agent, agent_config, candidate_kind, baseline, goal_metric, "
            "thresholds, used_steps, used_tokens, used_cost_usd, used_seconds, status, detail, evaluations, "
            "window_start, last_seq, runner_state, created_at, updated_at) VALUES (1, 'old', 'attention-forward', "
            "'scripted', '{}', 'cuda', 'b.cu', 'vs_baseline', '{}', 0, 0, 0, 0, 'done', '', 0, 0, 1, '{}', "
            "'2026-11-01 00:00:00', '2026-11-01 00:00:00')"))
        connection.execute(text("INSERT INTO event (session_id, seq, kind, payload, created_at) "
                                "VALUES (1, 1, 'session_created', '{}', '2026-11-01 00:00:00')"))
    database.upgrade()
    with database.session() as db:
        assert [e.kind for e in db.exec(select(Event))] == ["session_created"]
        session = db.get(SteeringSession, 1)
        assert session is not None and session.read_only is False
    database.dispose()
