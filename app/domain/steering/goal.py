"""The goal: a stop condition measured by the harness, never the agent's word. It reads
"geomean <metric> >= <target> on all scenarios" and is checked on the leader's report over
the session's whole scenario list, hidden scenarios included, with every scenario passing
and no sanity flag."""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.steering.session_judge import sanity_flags
from harness.report import EvaluationReport

GOAL_METRICS = {
    "vs_baseline": "speedup over the baseline",
    "vs_cudnn": "speedup over cuDNN (torch SDPA's cuDNN backend)",
    "vs_flash": "speedup over FA2 (torch SDPA's flash backend, FlashAttention-2)",
}


@dataclass(frozen=True)
class GoalCheck:
    met: bool
    value: float | None
    reason: str


def describe(metric: str, target: float | None) -> str:
    if target is None:
        return "no goal: the session runs until stopped or its budget is reached"
    return f"geomean {GOAL_METRICS.get(metric, metric)} >= {target:g} on all scenarios"


def measure(report: EvaluationReport, metric: str) -> float | None:
    summary = report.summary("all")
    if metric == "vs_baseline":
        return summary.vs_baseline
    return summary.vs_peers.get(metric.removeprefix("vs_"))


def check(report: EvaluationReport, metric: str, target: float | None) -> GoalCheck:
    value = measure(report, metric)
    if target is None:
        return GoalCheck(False, value, "the session has no goal")
    summary = report.summary("all")
    if not summary.complete:
        return GoalCheck(False, value, f"{summary.passed}/{summary.scenarios} scenarios passed")
    if sanity_flags(report):
        return GoalCheck(False, value, "a sanity flag blocks the verdict")
    if value is None:
        return GoalCheck(False, None, f"{metric} was not measured")
    timed = summary.timed if metric == "vs_baseline" else summary.peers_timed.get(metric.removeprefix("vs_"), 0)
    # The geomean is over the scenarios both sides were timed on: the reason never counts more.
    over = (f"on all {summary.scenarios} scenarios" if timed == summary.scenarios
            else f"over the {timed} of {summary.scenarios} scenarios where both were timed")
    if value >= target:
        return GoalCheck(True, value, f"{value:.3f}x >= {target:g}x {over}")
    return GoalCheck(False, value, f"{value:.3f}x < {target:g}x {over}")
