"""Server-side rendering: the Jinja environment (autoescaping every agent- and kernel-provided
text), the htmx fragments pushed over websockets, the speedup chart as SVG, and diffs (the
campaign tree: app/faces/web/campaign_tree.py)."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from fastapi.templating import Jinja2Templates
from sqlmodel import Session

from app.domain.audit.compare import PEER_MAX_AGE_S, peer_label
from app.domain.audit.hidden import hidden_results, timed_counts
from app.domain.audit.ratios import ratio_help
from app.domain.audit.timeline import fork_extra, payload_items, rounded
from app.domain.profiles import leader_profile
from app.domain.progress import MAX_TICKS, ChartMark, ChartPoint, chart_data, nice_step
from app.domain.sessions import SessionView, budget_of, budget_use, session_view
from app.domain.steering.suggestions import suggest
from app.settings import PROJECT_ROOT
from app.store.events import LiveNote
from app.store.models import BACKUP, DELIVERED, LEADER, PAUSED, REJECTED, Event, SteeringSession

TEMPLATES_DIR = PROJECT_ROOT / "templates"
STATIC_DIR = PROJECT_ROOT / "static"


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
    # events in words (app/domain/audit/timeline.py): numbers rounded, never a payload's raw JSON
    templates.env.filters["rounded"] = rounded
    templates.env.filters["payload_items"] = payload_items
    templates.env.filters["fork_extra"] = fork_extra
    # Every page names peers and says which way a ratio goes in the same words.
    templates.env.globals["peer_label"] = peer_label
    templates.env.globals["ratio_help"] = ratio_help
    return templates


TEMPLATES = make_templates()


def render(name: str, **context: Any) -> str:
    return TEMPLATES.env.get_template(name).render(**context)


# -- the chart -----------------------------------------------------------------------------


CHART_MAX = 1e6  # the highest speedup drawn (app/store/input_limits.MAX_SPEEDUP): beyond it a dot sits on top


def drawable(v: object) -> float | None:
    """A speedup as the chart draws it: a finite number clamped to [0, CHART_MAX], else None
    (drawn as a failure). An imported payload may hold anything; no value can stretch the axis."""
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
        return None
    return min(max(float(v), 0.0), CHART_MAX)


def chart_svg(points: list[ChartPoint], marks: list[ChartMark], goal: float | None) -> dict[str, Any]:
    """Coordinates for templates/fragments/chart.html (the template draws; this scales)."""
    width, height, left, right, top, bottom = 640, 220, 48, 12, 12, 28
    speedups = [drawable(p.speedup) for p in points]
    goal = drawable(goal) if goal is not None else None
    values = [v for v in speedups if v is not None] + [1.0]
    if goal is not None:
        values.append(goal)
    y_max = max(values) * 1.1
    y_min = 0.0
    n = max(len(points), 1)

    def sx(x: float) -> float:
        return left + (width - left - right) * (x - 0.5) / n

    def sy(y: float) -> float:
        return top + (height - top - bottom) * (1 - (y - y_min) / (y_max - y_min))

    dots = [{"x": round(sx(p.x), 1), "y": round(sy(v if v is not None else 0.0), 1),
             "verdict": p.verdict, "number": p.number, "speedup": v,
             "failed": v is None} for p, v in zip(points, speedups, strict=True)]
    # The leader line: a step function through the leaders' speedups.
    leader = 1.0
    path = [f"M{sx(0.5):.1f},{sy(leader):.1f}"]
    for p, v in zip(points, speedups, strict=True):
        if p.verdict == LEADER and v is not None:
            path.append(f"H{sx(p.x):.1f}")
            leader = v
            path.append(f"V{sy(leader):.1f}")
    path.append(f"H{sx(n + 0.5):.1f}")
    step = nice_step(y_max)
    ticks = [{"y": round(sy(k * step), 1), "label": f"{k * step:g}x"}
             for k in range(MAX_TICKS + 1) if k * step <= y_max]
    return {
        "width": width, "height": height, "left": left, "right": width - right, "top": top,
        "bottom": height - bottom, "dots": dots, "leader_path": " ".join(path), "ticks": ticks,
        "marks": [{"x": round(sx(m.x), 1), "label": m.label, "kind": m.kind} for m in marks],
        "goal_y": round(sy(goal), 1) if goal is not None else None, "goal": goal,
        "baseline_y": round(sy(1.0), 1), "empty": not points,
        "colors": {LEADER: "#1a7f37", BACKUP: "#9a6700", REJECTED: "#cf222e"},
    }


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
        # what bounds the leader, beside the suggested questions (app/domain/profiles.py)
        "profile": leader_profile(db, s) if trigger is not None and s.status == PAUSED else None,
        # hidden scenarios counted and aggregated beside "all" and "visible" (app/domain/audit/hidden.py)
        "hidden": hidden_results(db, s.id or 0),
        # the scenarios behind each candidate's "all" geomean (a baseline that failed leaves some out)
        "timed": timed_counts(db, s.id or 0),
    }


def goal_progress(s: SteeringSession) -> float | None:
    if s.goal_target is None:
        return None
    return max(0.0, min(1.0, (s.leader_speedup or 1.0) / s.goal_target))


def events_fragment(events: list[Event], last_seq: int) -> str:
    return render("fragments/events.html", events=events, last_seq=last_seq, oob=True)


def note_fragment(note: LiveNote) -> str:
    return render("fragments/activity.html", note=note, oob=True)
