"""The database on SQLite and on PostgreSQL (a real server, tests/conftest.py): every alembic
migration up and down on both, the schema equal to the models, and a session's event
numbers gapless and unique under concurrent writers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlmodel import col, select

import app.store.database
from app.domain.schemas import SessionCreate
from app.domain.sessions import get_session
from app.engine.new_session import create_session
from app.store.database import Database, alembic_config, current_revision, head_revision, load_models
from app.store.events import EventHub, Unit
from app.store.models import Event, SteeringSession
from tests.server_support import settings_for


def database_url(tmp_path: Path, backend: str) -> str:
    if backend == "postgresql":
        return os.environ["SOCRATIC_DB_URL"]  # a fresh database (the database_backend fixture)
    return f"sqlite:///{tmp_path / 'db.sqlite'}"


def test_every_migration_runs_up_and_down_and_the_schema_equals_the_models(
        tmp_path: Path, database_backend: str) -> None:
    db = Database(database_url(tmp_path, database_backend))
    metadata = load_models()
    url = db.engine.url.render_as_string(hide_password=False)
    revisions = [r.revision for r in ScriptDirectory.from_config(alembic_config(url)).walk_revisions()][::-1]
    assert len(revisions) >= 3
    with db.engine.begin() as conn:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        for rev in revisions:  # one revision at a time, as a server upgrading release by release would
            command.upgrade(cfg, rev)
        command.downgrade(cfg, "base")
        command.upgrade(cfg, "head")
    with db.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == revisions[-1]
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == [], f"the migrations and the models disagree on {db.engine.dialect.name}: {diff}"
    db.dispose()


def test_a_database_at_the_newest_revision_opens_without_running_alembic_and_an_older_one_is_upgraded(
        tmp_path: Path, database_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = database_url(tmp_path, database_backend)
    assert head_revision() == ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    db = Database(url)
    db.upgrade()
    head = current_revision(db.engine)
    assert head == head_revision()
    with db.engine.begin() as conn:  # one release behind
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "-1")
    assert current_revision(db.engine) not in (None, head)
    real, runs = command.upgrade, []

    def counted(*args: object, **kwargs: object) -> None:
        runs.append(args[1])
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(command, "upgrade", counted)
    db.upgrade()  # behind: alembic brings it to the head
    assert runs == ["head"] and current_revision(db.engine) == head
    db.upgrade()  # at the head: nothing to run
    assert runs == ["head"]
    db.dispose()


def test_migration_files_that_do_not_form_one_line_leave_the_decision_to_alembic(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    line = {"a.py": ("'r1'", "None"), "b.py": ("'r2'", "'r1'")}
    for name, (rev, down) in line.items():
        (versions / name).write_text(f"revision: str = {rev}\ndown_revision: str | None = {down}\n")
    monkeypatch.setattr(app.store.database, "MIGRATIONS_DIR", tmp_path)
    assert head_revision() == "r2"
    (versions / "c.py").write_text("revision: str = 'r3'\ndown_revision: str | None = 'r1'\n")
    assert head_revision() is None  # two heads
    (versions / "c.py").write_text("revision = make_id()\ndown_revision = 'r2'\n")
    assert head_revision() is None  # not a literal


def test_concurrent_writers_number_a_sessions_events_gapless_and_unique(
        tmp_path: Path, database_backend: str) -> None:
    db = Database(database_url(tmp_path, database_backend))
    db.upgrade()
    hub = EventHub()
    with Unit(db, hub) as u:
        sid = create_session(u, SessionCreate(title="t", agent_config={"script": "cpu-demo"}),
                             settings_for(tmp_path, allow_python_candidates=True)).id
    assert sid is not None
    writers, each = 6, 15
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            barrier.wait()
            for i in range(each):
                # Each writer holds a session object read before the others wrote: the stale
                # last_seq in memory must not decide the number.
                with Unit(db, hub) as u:
                    session = get_session(u.db, sid)
                    u.record(session, "note", {"writer": n, "i": i})
        except BaseException as exc:  # the assertion below shows it
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    with db.session() as s:
        seqs = list(s.exec(select(Event.seq).where(Event.session_id == sid).order_by(col(Event.seq))))
        last = s.get(SteeringSession, sid)
        assert last is not None
        per_writer = [len(list(s.exec(select(Event.id).where(Event.session_id == sid, Event.kind == "note")
                                      .where(col(Event.payload)["writer"].as_integer() == n))))
                      for n in range(writers)] if database_backend == "postgresql" else [each] * writers
    total = 1 + writers * each  # session_created, then the notes
    assert seqs == list(range(1, total + 1))
    assert last.last_seq == total
    assert per_writer == [each] * writers
    db.dispose()


def test_the_server_runs_a_session_on_either_database(tmp_path: Path, database_backend: str) -> None:
    from tests.server_support import cpu_session, events, running_app, submit, wait_status

    with running_app(tmp_path) as client:
        sid = cpu_session(client, [submit("correct_5ms"), {"declare_done": "done"}])["id"]
        client.post(f"/api/sessions/{sid}/start")
        state = wait_status(client, sid, "paused", "finished", "stopped", "failed", "done")
        evs = events(client, sid)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    assert state["leader_speedup"] is not None
    if database_backend == "postgresql":
        assert not (tmp_path / "socratic.db").exists()  # nothing went to SQLite behind our back


@pytest.mark.parametrize("url", ["postgresql://u:p@h/db", "postgres://u:p@h/db"])
def test_a_plain_postgresql_url_uses_psycopg_3(url: str) -> None:
    from app.faces.commands.serve import shown_url
    from app.store.database import engine_url

    assert engine_url(url).drivername == "postgresql+psycopg"
    assert "p@" not in shown_url(url) and "***" in shown_url(url)


def test_reports_with_infinity_and_nan_round_trip_on_either_database(tmp_path: Path, database_backend: str) -> None:
    import math

    db = Database(database_url(tmp_path, database_backend))
    db.upgrade()
    hub = EventHub()
    with Unit(db, hub) as u:
        session = create_session(u, SessionCreate(title="t", agent_config={"script": "cpu-demo"}),
                                 settings_for(tmp_path, allow_python_candidates=True))
        ev = u.record(session, "note", {"max_error": math.inf, "low": -math.inf, "nan": [math.nan], "ok": 1.5})
    with db.session() as s:
        stored = s.get(Event, ev.id)
        assert stored is not None
        payload = stored.payload
    assert payload["max_error"] == math.inf and payload["low"] == -math.inf
    assert math.isnan(payload["nan"][0]) and payload["ok"] == 1.5
    db.dispose()
