"""A candidate's profile (app/domain/profiles.py) from a report the harness did not write: an
imported trace may hold anything, and every reader gets no profile rather than an error."""

from __future__ import annotations

from pathlib import Path

from app.domain.profiles import candidate_profile
from app.settings import Settings
from app.store.database import open_database
from app.store.models import EVALUATED, Candidate, Evaluation, SteeringSession


def test_a_report_the_harness_did_not_write_has_no_profile(tmp_path: Path) -> None:
    database = open_database(Settings(data_dir=tmp_path, db_url=f"sqlite:///{tmp_path / 'p.db'}"))
    with database.session() as db:
        s = SteeringSession(title="odd", agent="scripted")
        db.add(s)
        db.flush()
        c = Candidate(session_id=s.id or 0, number=1, author="a", source="x", status=EVALUATED)
        db.add(c)
        db.flush()
        for report in ({"scenarios": "all of them"}, {"scenarios": [{"scenario": 3, "tflops": "fast"}]}):
            db.add(Evaluation(candidate_id=c.id or 0, purpose="suite", report=report))
            db.flush()
            assert candidate_profile(db, c) is None
