"""Shared parts of the campaign tests: a migrated SQLite file, a campaign of offline agents on
the synthetic family scenarios, and judged candidates with real rendered family kernels and
reports built the way tests/family_model.py times them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.domain.campaigns.schemas import CampaignCreate
from app.engine.campaigns import create_campaign
from app.settings import Settings
from app.store.campaign_models import Campaign
from app.store.database import Database, open_database
from app.store.events import EventHub, Unit
from app.store.models import EVALUATED, Candidate, Evaluation
from harness.report import PASS, CompileInfo, EvaluationReport, ScenarioResult
from kernels.attention.family import knobs_from_mapping, render
from tests.app.engine.agents.test_offline import SCENARIOS
from tests.family_model import speed

SCENARIO_SPECS = [{k: v for k, v in s.to_dict().items() if k not in ("model", "tags")} for s in SCENARIOS]


def database(tmp: Path) -> tuple[Database, Settings]:
    settings = Settings(data_dir=tmp, db_url=f"sqlite:///{tmp / 'c.db'}")
    return open_database(settings), settings


def unit(db: Database) -> Unit:
    return Unit(db, EventHub())


def new_campaign(db: Database, settings: Settings, **spec: Any) -> Campaign:
    body = {"title": "t", "agents": 3, "scenarios": SCENARIO_SPECS, "start": False, **spec}
    with unit(db) as u:
        c = create_campaign(u, CampaignCreate.model_validate(body), settings)
        u.db.expunge(c)
    return c


def report(knobs: dict[str, Any] | None, passed: bool = True) -> EvaluationReport:
    rows = []
    for s in SCENARIOS:
        v = speed(knobs, s)
        rows.append(ScenarioResult(s.name, s.category, s.hidden, PASS if passed else "wrong", time_ms=10.0 / v,
                                   baseline_ms=10.0, speedup_vs_baseline=v if passed else None, tflops=1.0))
    return EvaluationReport(kernel="k", baseline="baseline", gpu="synthetic", suite="all", scenarios=rows,
                            compile=CompileInfo(ok=True))


def judged(u: Unit, session_id: int, knobs: dict[str, Any], verdict: str, parent: Candidate | None = None,
           passed: bool = True) -> tuple[Candidate, EvaluationReport]:
    """A candidate of the session as the pipeline leaves it after its own verdict."""
    k = knobs_from_mapping(knobs)
    number = len(u.db.exec(Candidate.__table__.select().where(  # type: ignore[attr-defined]
        Candidate.session_id == session_id)).all()) + 1
    rep = report(k.to_dict(), passed)
    total = rep.summary("all")
    c = Candidate(session_id=session_id, number=number, author="offline", source=render(k), title=f"#{number}",
                  parent_id=parent.id if parent else None, status=EVALUATED, verdict=verdict,
                  speedup=total.vs_baseline, passed=total.passed, scenario_count=total.scenarios)
    u.db.add(c)
    u.db.flush()
    u.db.add(Evaluation(candidate_id=c.id or 0, purpose="suite", report=rep.to_dict()))
    u.db.flush()
    return c, rep
