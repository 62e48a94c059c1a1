"""A session's progress as its chart draws it, read from the trace: each verdict in order with
its speedup (a rejected kernel's on the axis), and where questions were delivered and triggers
fired between them. The page's chart (app/faces/web/render.py) and the audit's draw these."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlmodel import Session, col, select

from app.store.models import REJECTED, Event

MAX_TICKS = 8  # a chart axis never has more, whatever the data


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


def nice_step(top: float) -> float:
    """The tick step: the first of the usual steps that cuts [0, top] into at most six parts,
    else a 1-2-5 step of `top`'s magnitude; so the tick list is bounded by MAX_TICKS whatever
    the data (an imported trace may hold any number)."""
    if not math.isfinite(top) or top <= 0:
        return 1.0
    for step in (0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000):
        if top / step <= 6:
            return step
    magnitude = 10.0 ** math.floor(math.log10(top / 6))
    return next(f * magnitude for f in (1, 2, 5, 10) if top / (f * magnitude) <= 6)
