"""A candidate's per-scenario heatmap: the speedup over the baseline in every scenario of its
suite evaluation, grouped by scenario category, red where it is slower, green where faster,
grey where it failed. Laid out here for a server-drawn SVG."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.domain.audit.record import AuditRecord
from app.store.models import Candidate

CELL_W, CELL_H, GAP = 44, 26, 3
LABEL_W = 120
PER_ROW = 20
MARGIN = 6
# Colour scale: log2 of the speedup, saturating at 2**span either way; the span grows with the
# report (whole powers of two, 4x at least, 256x at most) so that a kernel 5-15x faster than
# the baseline does not show as one flat green.
MIN_SPAN, MAX_SPAN = 2, 8
FASTER = (0x1A, 0x7F, 0x37)
SLOWER = (0xCF, 0x22, 0x2E)
FAILED = "#8c959f"


@dataclass
class HeatCell:
    scenario: str
    category: str
    hidden: bool
    status: str
    speedup: float | None
    time_ms: float | None
    baseline_ms: float | None
    reason: str
    color: str
    x: float
    y: float
    dark: bool = False  # white text reads better on this cell

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def text(self) -> str:
        if not self.passed:
            return "✗"
        return "-" if self.speedup is None else f"{self.speedup:.2f}"


@dataclass
class HeatRow:
    category: str
    y: float
    cells: list[HeatCell]


@dataclass
class Heatmap:
    number: int
    purpose: str
    device: str
    rows: list[HeatRow]
    width: float
    height: float
    passed: int
    scenarios: int
    geomean: dict[str, Any]  # the report's geomeans by part (visible, hidden, all)
    span: int  # the colour scale saturates at 2**span and 2**-span

    def legend(self) -> list[tuple[str, str]]:
        return legend(self.span)

    @property
    def cells(self) -> list[HeatCell]:
        return [c for r in self.rows for c in r.cells]


def span_for(speedups: list[float | None]) -> int:
    logs = [abs(math.log2(v)) for v in speedups if v is not None and v > 0]
    return max(MIN_SPAN, min(MAX_SPAN, math.ceil(max(logs, default=0.0))))


def _mix(speedup: float, span: int) -> float:
    return max(-1.0, min(1.0, math.log2(speedup) / span))


def color_for(speedup: float | None, status: str, span: int = MIN_SPAN) -> str:
    if status != "pass" or speedup is None or speedup <= 0:
        return FAILED
    t = _mix(speedup, span)
    target = FASTER if t > 0 else SLOWER
    mix = abs(t)
    r, g, b = (round(255 + (c - 255) * mix) for c in target)
    return f"#{r:02x}{g:02x}{b:02x}"


def legend(span: int = MIN_SPAN) -> list[tuple[str, str]]:
    """(label, colour) stops for the scale: whole powers of two from 2**-span to 2**span."""
    stops = [2.0 ** k for k in range(-span, span + 1)]
    return [(f"1/{1 / v:g}x" if v < 1 else f"{v:g}x", color_for(v, "pass", span)) for v in stops] + [
        ("failed", FAILED)]


def _number(value: Any) -> float | None:
    # Reports come from the trace (an imported file holds whatever it holds): numbers only.
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def candidate_heatmap(record: AuditRecord, c: Candidate) -> Heatmap | None:
    """None when the candidate has no suite evaluation (not evaluated yet, or cancelled)."""
    evaluation = record.suite_evaluation(c)
    if evaluation is None:
        return None
    report = evaluation.report
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in report.get("scenarios", []):
        if isinstance(row, dict):
            groups.setdefault(str(row.get("category", "")) or "other", []).append(row)
    span = span_for([_number(r.get("speedup_vs_baseline")) for rows_ in groups.values() for r in rows_
                     if r.get("status") == "pass"])
    rows: list[HeatRow] = []
    y = float(MARGIN)
    for category, results in groups.items():
        row = HeatRow(category, y, [])
        for i, r in enumerate(results):
            if i and i % PER_ROW == 0:
                y += CELL_H + GAP
            speedup = _number(r.get("speedup_vs_baseline"))
            status = str(r.get("status", ""))
            row.cells.append(HeatCell(
                scenario=str(r.get("scenario", "")), category=category, hidden=bool(r.get("hidden")),
                status=status, speedup=speedup, time_ms=_number(r.get("time_ms")),
                baseline_ms=_number(r.get("baseline_ms")),
                reason=str(r.get("reason", "")), color=color_for(speedup, status, span),
                x=LABEL_W + (i % PER_ROW) * (CELL_W + GAP), y=y,
                dark=status != "pass" or (speedup is not None and speedup > 0 and abs(_mix(speedup, span)) > 0.6)))
        rows.append(row)
        y += CELL_H + GAP * 4
    widest = max((len(r.cells) for r in rows), default=0)
    width = LABEL_W + min(max(widest, 1), PER_ROW) * (CELL_W + GAP) + MARGIN
    cells = [cell for r in rows for cell in r.cells]
    return Heatmap(c.number, evaluation.purpose, evaluation.device, rows, width, max(y, CELL_H + 2 * MARGIN),
                   sum(1 for cell in cells if cell.passed), len(cells),
                   report.get("geomean", {}) if isinstance(report.get("geomean"), dict) else {}, span)
