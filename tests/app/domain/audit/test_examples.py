"""The example traces in examples/ (real H200 sessions) import as read-only sessions and
export again byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.audit.attribution import attribute
from app.domain.audit.record import load_record
from app.domain.audit.summary import audit_text
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


def test_the_silent_example_audits_as_a_control_and_the_bank_example_does_not(database: Database) -> None:
    silent, asked = (PROJECT_ROOT / "examples" / name for name in
                     ("h200-offline-silent.jsonl", "h200-offline-bank-questions.jsonl"))
    with database.session() as db:
        quiet = import_trace(db, silent.read_text(encoding="ascii"), silent.name)
        steered = import_trace(db, asked.read_text(encoding="ascii"), asked.name)
        db.commit()
        control = attribute(load_record(db, quiet.id or 0))
        bank = attribute(load_record(db, steered.id or 0))
        text = audit_text(load_record(db, quiet.id or 0))
    # seven plateau pauses resumed without a message, none followed by a new leader
    assert (control.silent.uses, control.silent.credited, control.silent.hit_rate) == (7, 7, 0.0)
    assert control.silent.geomean_gain == 1.0 and not control.interventions
    assert "silent control (pauses resumed without a message): 7 credited, geomean gain 1.000x" in text
    # every pause of the bank session was answered by a question: none of them is a control
    assert bank.silent.uses == 0 and len(bank.credited("question")) == 7
    assert bank.by_kind["question"].interval is not None
