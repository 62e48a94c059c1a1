"""scripts/campaign_experiment.py on the CPU stand-in (the machinery, not a result), and the
campaign traces kept in examples/campaigns/ (real H200 runs): each imports as a read-only
campaign and exports again to the same text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.audit.trace_io import trace_text
from app.campaigns.trace import export_campaign, import_campaign
from app.db import Database
from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "campaign_experiment.py"
CAMPAIGN_EXAMPLES = sorted((ROOT / "examples" / "campaigns").rglob("*.jsonl.xz"))
ARMS = ("autonomous", "bank", "board", "evolution")


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_experiment_runs_every_arm_on_one_budget_and_tables_the_seeds(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    text = run("--cpu-standin", "--out", str(out), "--seeds", "0", "1", "--evaluations", "5")
    assert "NOT a result" in text  # the stand-in says what it is
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cpu_standin"] and sorted(summary["seeds"]) == ["0", "1"]
    for results in summary["seeds"].values():
        assert sorted(results) == sorted(ARMS)
        for r in results.values():
            assert r["evaluations"] == 5 and "budget" in r["detail"]
            trace = out / r["trace"]
            assert trace.name.endswith(".jsonl.xz") and trace.read_bytes()[:6] == b"\xfd7zXZ\x00"
    table = run("--table", str(out / "summary.json"))
    assert all(f"\n{arm} " in table for arm in ARMS) and "2 seed(s)" in table
    assert "bank-steered vs autonomous" in table


@pytest.mark.skipif(not CAMPAIGN_EXAMPLES, reason="no campaign trace in examples/campaigns/")
@pytest.mark.parametrize("path", CAMPAIGN_EXAMPLES, ids=[p.name for p in CAMPAIGN_EXAMPLES])
def test_an_example_campaign_trace_imports_read_only_and_round_trips(path: Path, tmp_path: Path) -> None:
    text = trace_text(path.read_bytes(), 64 * 2**20)
    database = Database(f"sqlite:///{tmp_path / 'examples.db'}")
    database.upgrade()
    try:
        with database.session() as db:
            campaign = import_campaign(db, text, path.name)
            db.commit()
            assert campaign.read_only and campaign.evaluations >= 1
            assert export_campaign(db, campaign.id or 0) == text
    finally:
        database.dispose()
