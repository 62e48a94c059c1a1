"""The candidate page marks peer ratios that rest on cached peer times (harness/peer_cache.py)
and says how many there are and how old the oldest is."""

from __future__ import annotations

import time
from pathlib import Path

from sqlmodel import select

from app.store.models import PAUSED, Evaluation
from tests.server_support import cpu_session, running_app, submit, wait_status


def test_the_candidate_page_marks_cached_peer_ratios_and_says_how_many(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [submit("correct_5ms"), {"say": "done", "declare_done": "enough"}])["id"]
        wait_status(client, sid, PAUSED)
        db = client.app.state.engine.ctx.database  # type: ignore[attr-defined]
        with db.session() as s:
            row = s.exec(select(Evaluation).where(Evaluation.purpose == "suite")).first()
            assert row is not None
            report = dict(row.report)
            scen = [dict(x) for x in report["scenarios"]]
            scen[0]["peers"] = {"cudnn": {"status": "ok", "time_ms": 9.0, "tflops": 1.0, "reason": "",
                                          "cached_at": time.time() - 3 * 3600}}
            scen[0]["speedup_vs_peers"] = {"cudnn": 1.5}
            report["scenarios"] = scen
            row.report = report
            s.add(row)
            s.commit()
        page = client.get(f"/sessions/{sid}/candidates/1").text
    assert "1.500x <span class=\"muted\" title=\"peer time from the peer cache, measured 20" in page
    assert "(cached)</span>" in page
    assert "Note: 1 of 1 peer results came from the peer cache (the oldest measured 3.0 h earlier)" in page
    # the profile's category table: the strongest peer timed on most of the category's calls, geomean
    assert "<td>1.50x cudnn</td>" in page, page[page.find("x peer"):][:1500]
