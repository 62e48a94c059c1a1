"""What the pipeline records of a re-time (app/engine/pipeline.py): the comparison point by the
leader's number ("leader #1", what the pages show as the column), and in the `evaluation` event
the scenarios its speedup is over (`timed`), never more than were timed on both sides."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import select

from app.store.models import PAUSED, Evaluation
from tests.server_support import cpu_session, events, running_app, submit, wait_status


def test_a_retime_is_recorded_against_the_leader_by_number_with_its_timed_count(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [submit("correct_5ms"), submit("correct_2ms"),
                                   {"say": "done", "declare_done": "enough"}])["id"]
        wait_status(client, sid, PAUSED)
        db = client.app.state.engine.ctx.database  # type: ignore[attr-defined]
        with db.session() as s:
            retime = s.exec(select(Evaluation).where(Evaluation.purpose == "retime")).one()
        assert retime.against == "leader #1"
        log = events(client, sid)
        started = [e["payload"]["against"] for e in log if e["kind"] == "evaluation_started"]
        assert started == ["baseline", "baseline", "leader #1"]
        evaluated = [e["payload"] for e in log if e["kind"] == "evaluation"]
        assert [(p["purpose"], p["against"]) for p in evaluated] == [
            ("suite", "baseline"), ("suite", "baseline"), ("retime", "leader #1")]
        assert all(p["timed"] == p["scenarios"] == 4 for p in evaluated)  # the CPU stand-ins time everywhere
        page = client.get(f"/sessions/{sid}/candidates/2").text
    assert "re-time vs leader #1: all 4 scenarios timed," in page
    assert '<th class="ratio-col" title="x leader #1 = leader #1 time / this kernel&#39;s time' in page
