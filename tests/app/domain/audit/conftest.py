"""Fixtures for the audit's tests: databases are real SQLite files migrated by alembic, and
the recorded session is a real one: the scripted agent's CPU stand-in kernels evaluated by
the harness's worker processes, steered with a question through the server's API."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.domain.audit.trace_io import export_session
from app.store.database import Database
from tests.server_support import cpu_session, running_app, submit, wait_status

QUESTION = "What bounds this kernel now: the waits or the arithmetic?"
INFORMATION = "The hidden scenarios include a chunked prefill."


@dataclass(frozen=True)
class RecordedSession:
    db_path: Path
    session_id: int
    trace: str  # its export


def open_database(path: Path) -> Database:
    database = Database(f"sqlite:///{path}")
    database.upgrade()
    return database


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = open_database(tmp_path / "audit.db")
    yield db
    db.dispose()


def record_session(data_dir: Path) -> RecordedSession:
    """A short steered session: a 2x leader, a variant that skips rows (rejected), one that
    gains nothing (a plateau pauses the session), then a piece of information and a question,
    and a 5x leader; the script then ends its turn (a declared limit pauses it again)."""
    steps = [
        submit("correct_5ms", "halve the overhead"),
        {"say": "Writing only the first rows saves work.",
         "submit": {"target": "tests.app.domain.audit.slow_kernels:skips_tail_5ms", "title": "skip the tail rows",
                    "parent": 1}},
        submit("correct_5ms_retiled", "retile", parent=1),
        submit("correct_2ms", "overlap the waits", parent=1),
    ]
    with running_app(data_dir, bank_semantic_search=False) as client:
        sid = int(cpu_session(client, steps, title="audit <demo>",
                              thresholds={"plateau_window": 2, "min_leader_gain": 0.25,
                                          "suspicious_jump": 50})["id"])
        state = wait_status(client, sid, "paused", timeout=120)
        assert "Plateau" in state["detail"], state["detail"]
        r = client.post(f"/api/sessions/{sid}/interventions",
                        json={"text": INFORMATION, "kind": "information", "resume": False})
        assert r.status_code == 201, r.text
        r = client.post(f"/api/sessions/{sid}/interventions", json={"text": QUESTION, "kind": "question"})
        assert r.status_code == 201, r.text
        state = wait_status(client, sid, "paused", "done", "failed", timeout=120)
        assert state["status"] == "paused", state
    db_path = data_dir / "socratic.db"
    database = open_database(db_path)
    try:
        with database.session() as db:
            trace = export_session(db, sid)
    finally:
        database.dispose()
    return RecordedSession(db_path, sid, trace)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedSession:
    return record_session(tmp_path_factory.mktemp("recorded"))
