"""The server's evaluation settings (app/services/evaluation.py) against the harness's defaults."""

from __future__ import annotations

from app.services.evaluation import eval_settings
from harness.timing import TimingSettings


def test_the_server_keeps_the_sample_cap_its_re_times_were_measured_under() -> None:
    """The CLI's fresh evaluation takes 10-25 samples; a session's evaluation and the judge's
    re-time keep up to 50, whatever their budget (docs/harness.md, "Settings and their defaults")."""
    for budget in (5.0, 20.0):
        s = eval_settings("cuda", trials=2, timing_budget_ms=budget, scenario_timeout_s=60.0,
                          peers=("cudnn",)).timing
        assert (s.budget_ms, s.max_reps, s.min_reps) == (budget, 50, 10)
    assert TimingSettings().max_reps == 25
