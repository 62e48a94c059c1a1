"""What the agent reads back: harness results reduced to the visible scenarios (hidden ones
are counted, never named), candidate listings, and the compact result of `evaluate`."""

from __future__ import annotations

from typing import Any

from app.store.models import Candidate
from harness.report import EvaluationReport

SLOWEST_SHOWN = 3
FAILURES_SHOWN = 5


def fmt(v: float | None, spec: str = ".3f", suffix: str = "x") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def visible_results(report: EvaluationReport) -> dict[str, Any]:
    """The report as an agent may see it."""
    visible = report.summary("visible")
    hidden = [r for r in report.scenarios if r.hidden]
    return {
        "compiled": report.compile.ok,
        "compile_log": report.compile.log[-4000:] if not report.compile.ok else "",
        "visible": {"passed": visible.passed, "scenarios": visible.scenarios, "timed": visible.timed,
                    "geomean_vs_baseline": visible.vs_baseline,
                    "geomean_vs_peers": visible.vs_peers},
        "hidden": {"passed": sum(r.passed for r in hidden), "scenarios": len(hidden)},
        "scenarios": [
            {"scenario": r.scenario, "status": r.status, "reason": r.reason, "time_ms": r.time_ms,
             "tflops": r.tflops, "speedup_vs_baseline": r.speedup_vs_baseline,
             "speedup_vs_peers": r.speedup_vs_peers, "flags": r.flags}
            for r in report.scenarios if not r.hidden
        ],
    }


def describe_evaluation(c: Candidate, view: dict[str, Any]) -> str:
    vis, hid = view["visible"], view["hidden"]
    lines = [
        f"Candidate #{c.number} ({c.title or 'untitled'}): {c.verdict} - {c.verdict_reason}",
    ]
    if not view["compiled"]:
        lines.append("It did not compile:")
        lines.append(view["compile_log"])
        return "\n".join(lines)
    over = (f" over the {vis['timed']} where the baseline was timed"
            if vis["geomean_vs_baseline"] is not None and vis.get("timed", vis["scenarios"]) < vis["scenarios"] else "")
    lines.append(f"Visible scenarios: {vis['passed']}/{vis['scenarios']} passed, geomean "
                 f"{fmt(vis['geomean_vs_baseline'])} vs baseline{over}.")
    if hid["scenarios"]:
        lines.append(f"Hidden scenarios (not shown to you): {hid['passed']}/{hid['scenarios']} passed.")
    for row in view["scenarios"]:
        note = row["reason"] or "; ".join(row["flags"])
        lines.append(f"  {row['scenario']}: {row['status']} {fmt(row['time_ms'], '.4f', ' ms')} "
                     f"{fmt(row['speedup_vs_baseline'])}" + (f"  {note}" if note else ""))
    return "\n".join(lines)


def describe_candidates(cands: list[Candidate]) -> str:
    if not cands:
        return "No candidates yet."
    return "\n".join(
        f"#{c.number} {c.verdict or c.status}: visible {fmt(c.visible_speedup)} - {c.title or 'untitled'}"
        for c in cands
    )


def compact_evaluation(data: dict[str, Any]) -> str:
    """A few lines an agent can act on: verdict, geomean, failures with reasons, slowest scenarios."""
    head = f"Candidate #{data.get('number')}: {data.get('verdict')} - {data.get('reason', '')}"
    if "visible" not in data:
        return head
    if not data.get("compiled", True):
        return f"{head}\nIt did not compile or failed the static checks:\n{data.get('compile_log', '')}"
    vis, hid = data["visible"], data["hidden"]
    peers = ", ".join(f"{fmt(v)} {name}" for name, v in (vis.get("geomean_vs_peers") or {}).items() if v)
    lines = [head, f"Visible: {vis['passed']}/{vis['scenarios']} passed; geomean {fmt(vis['geomean_vs_baseline'])} "
                   f"vs baseline" + (f" ({peers})" if peers else "") + "."]
    rows = data.get("scenarios", [])
    failed = [r for r in rows if r["status"] != "pass"]
    for r in failed[:FAILURES_SHOWN]:
        lines.append(f"  FAILED {r['scenario']}: {r['status']} ({r['reason'] or 'no reason given'})")
    if len(failed) > FAILURES_SHOWN:
        lines.append(f"  ... and {len(failed) - FAILURES_SHOWN} more failures")
    timed = sorted((r for r in rows if r["status"] == "pass" and r.get("speedup_vs_baseline")),
                   key=lambda r: r["speedup_vs_baseline"])
    if timed:
        slow = "; ".join(f"{r['scenario']} {fmt(r['speedup_vs_baseline'])}"
                         + (f" ({r['tflops']:.1f} TFLOP/s)" if r.get("tflops") else "")
                         for r in timed[:SLOWEST_SHOWN])
        lines.append(f"  slowest vs baseline: {slow}")
    flagged = [r for r in rows if r.get("flags")]
    for r in flagged[:FAILURES_SHOWN]:
        lines.append(f"  FLAGGED {r['scenario']}: {'; '.join(r['flags'])}")
    if hid["scenarios"]:
        lines.append(f"Hidden scenarios (not shown to you): {hid['passed']}/{hid['scenarios']} passed.")
    return "\n".join(lines)
