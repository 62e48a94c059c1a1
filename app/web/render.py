"""Server-side rendering: the Jinja environment (autoescaping every agent- and kernel-provided
text), the htmx fragments pushed over websockets, the speedup chart as SVG, and diffs."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates
from sqlmodel import Session, col, select

from app.audit.compare import PEER_MAX_AGE_S
from app.events import LiveNote
from app.models import BACKUP, DELIVERED, LEADER, PAUSED, REJECTED, Event, SteeringSession
from app.sessions import SessionView, budget_of, budget_use, session_view
from app.steering.suggestions import suggest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"


def _speedup(v: float | None) -> str:
    # Not only None: an imported trace's payloads are whatever its file held.
    return f"{v:.3f}x" if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def _when(v: dt.datetime | None) -> str:
    if v is None:
        return ""
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.UTC)
    return v.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _epoch(v: float | None) -> str:
    if not isinstance(v, int | float) or isinstance(v, bool):
        return ""
    return _when(dt.datetime.fromtimestamp(v, dt.UTC))


def _cached_peer_note(report: dict[str, Any]) -> str | None:
    from harness.report import EvaluationReport

    try:
        parsed = EvaluationReport.from_dict(report)
        # Ages count from when the evaluation ran, not from now: an old trace is not "stale" today.
        started = dt.datetime.fromisoformat(parsed.started_at).timestamp() if parsed.started_at else None
        note = parsed.cached_peer_note(now=started)
    except (KeyError, TypeError, ValueError):  # an imported trace's report may be anything
        return None
    stamps = [p.cached_at for r in parsed.scenarios for p in r.peers.values() if p.cached_at is not None]
    if note and started is not None and stamps and started - min(stamps) > PEER_MAX_AGE_S:
        note += "; some were past the 24 h limit (stale): the audit's peer columns leave those out"
    return note


def _pretty(v: Any) -> str:
    return json.dumps(v, indent=1, default=str, ensure_ascii=False)


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
    # Autoescape is on for every template (Starlette's default); never mark agent text safe.
    templates.env.autoescape = True
    templates.env.filters["speedup"] = _speedup
    templates.env.filters["when"] = _when
    templates.env.filters["pretty"] = _pretty
    templates.env.filters["epoch"] = _epoch
    templates.env.filters["cached_peer_note"] = _cached_peer_note
    return templates


TEMPLATES = make_templates()


def render(name: str, **context: Any) -> str:
    return TEMPLATES.env.get_template(name).render(**context)


# -- the chart -----------------------------------------------------------------------------


@dataclass
class ChartPoint:
    x: int  # evaluation index, from 1
    number: int
    verdict: str
    speedup: float | None


@dataclass
class ChartMark:
    x: float  # between evaluations
    label: str
    kind: str  # "intervention" | "trigger"


def chart_data(db: Session, session_id: int) -> tuple[list[ChartPoint], list[ChartMark]]:
    """Points and marks from the trace: verdicts in order, and where interventions were
    delivered and triggers fired between them."""
    rows = db.exec(select(Event).where(Event.session_id == session_id,
                                       col(Event.kind).in_(["verdict", "delivered", "trigger"]))
                   .order_by(col(Event.seq))).all()
    points: list[ChartPoint] = []
    marks: list[ChartMark] = []
    for e in rows:
        if e.kind == "verdict":
            verdict = str(e.payload.get("verdict", ""))
            # A rejected kernel's speed on the scenarios it passed means nothing: drawn on the axis.
            speedup = None if verdict == REJECTED else e.payload.get("speedup")
            points.append(ChartPoint(len(points) + 1, int(e.payload.get("number", 0)), verdict, speedup))
        elif e.kind == "delivered":
            for text in e.payload.get("texts", []):
                marks.append(ChartMark(len(points) + 0.5, str(text), "intervention"))
        else:
            marks.append(ChartMark(len(points) + 0.5, str(e.payload.get("summary", "")), "trigger"))
    return points, marks


def chart_svg(points: list[ChartPoint], marks: list[ChartMark], goal: float | None) -> dict[str, Any]:
    """Coordinates for templates/fragments/chart.html (the template draws; this scales)."""
    width, height, left, right, top, bottom = 640, 220, 48, 12, 12, 28
    values = [p.speedup for p in points if p.speedup is not None] + [1.0]
    if goal is not None:
        values.append(goal)
    y_max = max(values) * 1.1
    y_min = 0.0
    n = max(len(points), 1)

    def sx(x: float) -> float:
        return left + (width - left - right) * (x - 0.5) / n

    def sy(y: float) -> float:
        return top + (height - top - bottom) * (1 - (y - y_min) / (y_max - y_min))

    dots = [{"x": round(sx(p.x), 1), "y": round(sy(p.speedup if p.speedup is not None else 0.0), 1),
             "verdict": p.verdict, "number": p.number, "speedup": p.speedup,
             "failed": p.speedup is None} for p in points]
    # The leader line: a step function through the leaders' speedups.
    leader = 1.0
    path = [f"M{sx(0.5):.1f},{sy(leader):.1f}"]
    for p in points:
        if p.verdict == LEADER and p.speedup is not None:
            path.append(f"H{sx(p.x):.1f}")
            leader = p.speedup
            path.append(f"V{sy(leader):.1f}")
    path.append(f"H{sx(n + 0.5):.1f}")
    ticks = []
    step = _nice_step(y_max)
    y = 0.0
    while y <= y_max:
        ticks.append({"y": round(sy(y), 1), "label": f"{y:g}x"})
        y += step
    return {
        "width": width, "height": height, "left": left, "right": width - right, "top": top,
        "bottom": height - bottom, "dots": dots, "leader_path": " ".join(path), "ticks": ticks,
        "marks": [{"x": round(sx(m.x), 1), "label": m.label, "kind": m.kind} for m in marks],
        "goal_y": round(sy(goal), 1) if goal is not None else None, "goal": goal,
        "baseline_y": round(sy(1.0), 1), "empty": not points,
        "colors": {LEADER: "#1a7f37", BACKUP: "#9a6700", REJECTED: "#cf222e"},
    }


def _nice_step(top: float) -> float:
    for step in (0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000):
        if top / step <= 6:
            return step
    return top / 5


# -- fragments -----------------------------------------------------------------------------


def panels(db: Session, session_id: int, view: SessionView | None = None) -> str:
    """The state panels of a session page, each swapped by id (out of band)."""
    view = view or session_view(db, session_id)
    return render("fragments/panels.html", **panel_context(db, view), oob=True)


def panel_context(db: Session, view: SessionView) -> dict[str, Any]:
    s = view.session
    points, marks = chart_data(db, s.id or 0)
    trigger = view.trigger
    return {
        "view": view,
        "s": s,
        "budget": budget_of(s),
        "used": budget_use(s),
        "chart": chart_svg(points, marks, s.goal_target),
        "suggestions": suggest(trigger.kind, trigger.evidence, session_id=s.id, db=db)
        if trigger is not None and s.status == PAUSED else [],
        "goal_progress": goal_progress(s),
        "pending": [i for i in view.interventions if i.status != DELIVERED],
    }


def goal_progress(s: SteeringSession) -> float | None:
    if s.goal_target is None:
        return None
    return max(0.0, min(1.0, (s.leader_speedup or 1.0) / s.goal_target))


def events_fragment(events: list[Event], last_seq: int) -> str:
    return render("fragments/events.html", events=events, last_seq=last_seq, oob=True)


def note_fragment(note: LiveNote) -> str:
    return render("fragments/activity.html", note=note, oob=True)
