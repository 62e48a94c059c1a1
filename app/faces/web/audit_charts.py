"""Coordinates for the audit page's SVG charts (templates draw them; nothing loads from the
internet). The speedup chart reuses the session page's scaling (app/faces/web/render.chart_svg)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.domain.audit.attribution import Attribution, attribute
from app.domain.audit.churn import ChurnReport, session_churn
from app.domain.audit.compare import LeaderStats, peer_label
from app.domain.audit.cost import PROMPT_PARTS, TOKEN_LABELS, CostReport, session_cost
from app.domain.audit.record import AuditRecord
from app.domain.progress import ChartMark, ChartPoint
from app.faces.web.render import chart_svg


def speedup_chart(attribution: Attribution, goal: float | None) -> dict[str, Any]:
    """Speedup per evaluation with the leader line; triggers and delivered messages marked
    between the evaluations they fell between, labelled as in the attribution table."""
    points = [ChartPoint(s.index, s.number, s.verdict, s.speedup) for s in attribution.steps]
    # A trigger and the message that answered it fall between the same two evaluations: the
    # trigger is drawn a little to the left, the message to the right, so neither hides the other.
    marks = [ChartMark(t.after_evaluations + 0.35, f"{t.kind}: {t.summary}", "trigger") for t in attribution.triggers]
    for i in attribution.interventions:
        if i.after_evaluations is not None:
            marks.append(ChartMark(i.after_evaluations + 0.65, f"{i.label} {i.kind}: {i.text}", i.kind))
    chart = chart_svg(points, marks, goal)
    n = max(len(points), 1)
    step = next((k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500) if n / k <= 12), 1000)
    chart["x_ticks"] = [{"x": d["x"], "label": str(i)} for i, d in enumerate(chart["dots"], 1)
                        if i == 1 or i % step == 0]
    # Backups drawn above the leader line: faster on the geomean, yet not the leader (the
    # judge's reason, e.g. a re-time against the leader, is shown beside the chart).
    leader = 1.0
    for p, d in zip(points, chart["dots"], strict=True):
        speedup = d["speedup"]  # as drawn: finite and bounded (render.drawable)
        if p.verdict == "leader" and speedup is not None:
            leader = speedup
        d["above_leader"] = p.verdict == "backup" and speedup is not None and speedup > leader
    # Labels above the marks that are messages, so the chart and the table read together.
    labels = []
    for m, src in zip(chart["marks"], marks, strict=True):
        if src.kind != "trigger":
            labels.append({"x": m["x"], "text": src.label.split(" ", 1)[0], "kind": src.kind})
    chart["labels"] = labels
    return chart


@dataclass(frozen=True)
class Frame:
    width: int = 640
    height: int = 180
    left: int = 48
    right: int = 12
    top: int = 14
    bottom: int = 26

    def sx(self, i: float, n: int) -> float:
        return round(self.left + (self.width - self.left - self.right) * (i - 0.5) / max(n, 1), 1)

    def sy(self, v: float, top: float) -> float:
        span = top if top > 0 else 1.0
        return round(self.top + (self.height - self.top - self.bottom) * (1 - v / span), 1)


def churn_chart(report: ChurnReport) -> dict[str, Any]:
    """Cumulative re-added share (line) and each edit's share (bars), 0-100%."""
    f = Frame()
    n = len(report.edits)
    bar_w = max(2.0, (f.width - f.left - f.right) / max(n, 1) * 0.6)
    bars: list[dict[str, Any]] = []
    path: list[str] = []
    for i, e in enumerate(report.edits, 1):
        x = f.sx(i, n)
        if e.share is not None:
            y = f.sy(e.share, 1.0)
            bars.append({"x": round(x - bar_w / 2, 1), "y": y, "h": round(f.height - f.bottom - y, 1),
                         "w": round(bar_w, 1), "number": e.number, "share": e.share, "added": e.added,
                         "readded": e.readded})
        if e.cumulative_share is not None:
            path.append(f"{'M' if not path else 'L'}{x},{f.sy(e.cumulative_share, 1.0)}")
    ticks = [{"y": f.sy(v, 1.0), "label": f"{v:.0%}"} for v in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return {"width": f.width, "height": f.height, "left": f.left, "right": f.width - f.right,
            "bottom": f.height - f.bottom, "bars": bars, "path": " ".join(path), "ticks": ticks,
            "empty": not bars and not path}


def cost_chart(report: CostReport) -> dict[str, Any]:
    """Money per agent step (bars) and the running total (line); tokens instead when the agent
    recorded tokens but no money."""
    f = Frame()
    n = len(report.steps)
    money = report.cost_usd > 0
    values = [(s.cost_usd or 0.0) if money else float(s.total_tokens) for s in report.steps]
    running: list[float] = []
    for v in values:
        running.append((running[-1] if running else 0.0) + v)
    top = max([*running, 0.0]) * 1.1
    bar_w = max(2.0, (f.width - f.left - f.right) / max(n, 1) * 0.6)
    bars: list[dict[str, Any]] = []
    path: list[str] = []
    for s, v, total in zip(report.steps, values, running, strict=True):
        x = f.sx(s.index, n)
        y = f.sy(v, top)
        bars.append({"x": round(x - bar_w / 2, 1), "y": y, "h": round(f.height - f.bottom - y, 1),
                     "w": round(bar_w, 1), "index": s.index, "cost": s.cost_usd, "tokens": s.total_tokens})
        path.append(f"{'M' if not path else 'L'}{x},{f.sy(total, top)}")

    def label(v: float) -> str:
        return f"${v:.2f}" if money else f"{v:,.0f}"

    ticks = [{"y": f.sy(top * k / 4, top), "label": label(top * k / 4)} for k in range(5)] if top > 0 else []
    return {"width": f.width, "height": f.height, "left": f.left, "right": f.width - f.right,
            "bottom": f.height - f.bottom, "bars": bars, "path": " ".join(path), "ticks": ticks,
            "empty": top <= 0, "unit": "money" if money else "tokens"}


def overview_context(record: AuditRecord, peers: LeaderStats | None) -> dict[str, Any]:
    """The audit overview's content with its three charts (also drawn by an import's page check)."""
    attribution = attribute(record)
    churn = session_churn(record)
    cost = session_cost(record)
    return {"attribution": attribution, "chart": speedup_chart(attribution, record.session.goal_target),
            "churn": churn, "churn_chart": churn_chart(churn), "cost": cost, "cost_chart": cost_chart(cost),
            "token_labels": TOKEN_LABELS, "prompt_parts": PROMPT_PARTS, "peers": peers, "peer_label": peer_label}
