"""The example traces in examples/ (real H200 sessions) import as read-only sessions and
export again byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.audit.attribution import attribute
from app.domain.audit.record import load_record
from app.domain.audit.trace_io import export_session, import_trace
from app.settings import PROJECT_ROOT
from app.store.database import Database

EXAMPLES = sorted((PROJECT_ROOT / "examples").glob("*.jsonl"))


@pytest.mark.skipif(not EXAMPLES, reason="no example trace in examples/")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_trace_round_trips_and_can_be_audited(path: Path, database: Database) -> None:
    text = path.read_text(encoding="ascii")
    with database.session() as db:
        session = import_trace(db, text, path.name)
        db.commit()
        sid = session.id or 0
        assert export_session(db, sid) == text
        record = load_record(db, sid)
        assert record.session.read_only and record.candidates
        assert attribute(record).steps  # at least one judged candidate
