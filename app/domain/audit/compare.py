"""Sessions side by side: each session's leader curve (the leader's speedup after every
evaluation) with the messages delivered along it, a table of leaders (over the baseline, over
every peer its report timed, per scenario category), and a per-scenario heatmap of one leader
against another. Reads AuditRecords (live and imported sessions alike); writes nothing.

Peer ratios: a peer time taken from the peer cache more than PEER_MAX_AGE_S before the
evaluation started is not a side-by-side measurement; such ratios are left out and counted,
never shown as fresh."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

from app.domain.audit.heatmap import color_for, span_for
from app.domain.audit.record import AuditRecord
from app.domain.progress import MAX_TICKS, nice_step
from app.store.models import LEADER
from harness.profile import measured_rates, roofline_share
from harness.report import PEER_LABELS, PEER_NAMES
from harness.stats import geomean

PEER_MAX_AGE_S = 24 * 3600.0  # the harness's --peer-cache-hours default
COLORS = ("#0969da", "#bc4c00", "#8250df", "#1a7f37")  # one per compared session, at most 4
MAX_SESSIONS = 4


def peer_label(name: str) -> str:
    return PEER_LABELS.get(name, name)


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _ratio(value: Any) -> float | None:
    """A stored ratio or rate, if it is one: a trace imported from elsewhere may hold anything,
    and a geomean takes only positive finite values (harness/stats.py)."""
    v = _number(value)
    return v if v is not None and v > 0 else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _started(report: dict[str, Any]) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(report.get("started_at", ""))).timestamp()
    except ValueError:
        return None


@dataclass
class PeerRatio:
    name: str
    ratio: float | None  # geomean of the leader over this peer, fresh measurements only
    scenarios: int  # scenarios behind the ratio
    stale: int  # ratios left out: the peer time was cached past PEER_MAX_AGE_S
    oldest_h: float | None  # age of the oldest cached peer time used, hours before the evaluation

    @property
    def label(self) -> str:
        return peer_label(self.name)


@dataclass
class ScenarioRatios:
    """One scenario a leader passed, as its suite report measured it."""

    category: str
    vs_baseline: float | None
    peers: dict[str, float]  # fresh ratios over each peer (a stale cached peer time is left out)
    stale: frozenset[str]  # peers whose time here was cached past PEER_MAX_AGE_S
    gbps: float | None
    time_ms: float | None


@dataclass
class LeaderStats:
    """What a leader's suite report says: over the baseline, each peer, each category, and over
    which scenarios on which GPU (a geomean means nothing without its scenario set)."""

    vs_baseline: float | None
    peers: dict[str, PeerRatio]
    categories: dict[str, float | None]
    gbps: dict[str, float | None]  # geomean GB/s per category (what decode is bound by)
    times: dict[str, float]  # scenario -> ms, passed scenarios only
    scenario_categories: dict[str, str]
    gpu: str = ""
    evaluated: tuple[str, ...] = ()  # every scenario of the report, passed or not
    rows: dict[str, ScenarioRatios] = field(default_factory=dict)  # the passed ones
    # The roofline the harness measured on that GPU (harness/profile.py), where the report has it.
    matrix_tflops: float | None = None
    copy_gbps: float | None = None
    unavailable: dict[str, str] = field(default_factory=dict)  # peers asked for but not run: name -> why

    @property
    def scenarios(self) -> int:
        return len(self.evaluated)

    def gbps_share(self, category: str) -> float | None:
        """A category's geomean GB/s as a percentage of the measured copy bandwidth."""
        return roofline_share(self.gbps.get(category), self.copy_gbps)

    @property
    def passed(self) -> int:
        return len(self.rows)


def _scenario_rows(report: dict[str, Any]) -> dict[str, ScenarioRatios]:
    started = _started(report)
    rows: dict[str, ScenarioRatios] = {}
    for r in report.get("scenarios", []):
        if not isinstance(r, dict) or r.get("status") != "pass":
            continue
        peers: dict[str, float] = {}
        stale: set[str] = set()
        for name, value in (r.get("speedup_vs_peers") or {}).items():
            ratio = _ratio(value)
            if ratio is None:
                continue
            peer = (r.get("peers") or {}).get(name) or {}
            cached = _number(peer.get("cached_at")) if isinstance(peer, dict) else None
            if cached is not None and started is not None and started - cached > PEER_MAX_AGE_S:
                stale.add(str(name))
                continue
            peers[str(name)] = ratio
        rows[str(r.get("scenario"))] = ScenarioRatios(
            str(r.get("category") or "other"), _ratio(r.get("speedup_vs_baseline")), peers, frozenset(stale),
            _ratio(r.get("gbps")), _number(r.get("time_ms")))
    return rows


def _oldest_cached_h(report: dict[str, Any], name: str, scenarios: set[str]) -> float | None:
    started = _started(report)
    oldest = None
    for r in report.get("scenarios", []):
        if not isinstance(r, dict) or str(r.get("scenario")) not in scenarios:
            continue
        peer = (r.get("peers") or {}).get(name) or {}
        cached = _number(peer.get("cached_at")) if isinstance(peer, dict) else None
        if cached is not None and started is not None and started - cached <= PEER_MAX_AGE_S:
            oldest = max(oldest or 0.0, (started - cached) / 3600)
    return oldest


def leader_stats(report: dict[str, Any], only: set[str] | None = None) -> LeaderStats:
    """The leader's numbers over every scenario of its report, or over `only` (the scenarios
    it shares with the sessions it is compared with)."""
    evaluated = tuple(str(r.get("scenario")) for r in report.get("scenarios", []) if isinstance(r, dict)
                      and (only is None or str(r.get("scenario")) in only))
    rows = {n: row for n, row in _scenario_rows(report).items() if only is None or n in only}
    names: list[str] = list(PEER_NAMES)
    for row in rows.values():
        names += [p for p in (*row.peers, *row.stale) if p not in names]
    peers: dict[str, PeerRatio] = {}
    for name in names:
        fresh = [row.peers[name] for row in rows.values() if name in row.peers]
        stale = sum(name in row.stale for row in rows.values())
        if fresh or stale:
            peers[name] = PeerRatio(name, geomean(fresh), len(fresh), stale,
                                    _oldest_cached_h(report, name, set(rows)))
    by_cat: dict[str, list[float]] = {}
    by_cat_gbps: dict[str, list[float]] = {}
    for row in rows.values():
        by_cat.setdefault(row.category, [])
        if row.vs_baseline is not None:
            by_cat[row.category].append(row.vs_baseline)
        if row.gbps is not None:
            by_cat_gbps.setdefault(row.category, []).append(row.gbps)
    overall = None
    if only is None:  # the report's own geomean over all its scenarios, where it has one
        geo = report.get("geomean")
        part = geo.get("all") if isinstance(geo, dict) else None
        overall = _number(part.get("vs_baseline")) if isinstance(part, dict) else None
    if overall is None:
        overall = geomean(v for vs in by_cat.values() for v in vs)
    settings = _mapping(report.get("settings"))
    matrix, copy = measured_rates(settings)
    missing = _mapping(_mapping(settings.get("device_info")).get("peers_unavailable"))
    return LeaderStats(overall, peers, {c: geomean(v) for c, v in by_cat.items()},
                       {c: geomean(v) for c, v in by_cat_gbps.items()},
                       {n: row.time_ms for n, row in rows.items() if row.time_ms is not None},
                       {n: row.category for n, row in rows.items()}, str(report.get("gpu") or ""),
                       evaluated, rows, matrix, copy,
                       {str(k): str(v) for k, v in missing.items() if str(k) not in peers})


@dataclass
class CurveMark:
    after: int  # evaluations finished when it was delivered
    author: str
    kind: str
    text: str


@dataclass
class Arm:
    """One compared session."""

    session_id: int
    title: str
    agent: str
    imported: bool
    color: str
    leader_number: int | None
    leader_speedup: float | None
    curve: list[tuple[int, float]]  # (evaluation, leader speedup after it)
    marks: list[CurveMark]
    stats: LeaderStats | None  # over the scenarios every compared session ran (`Comparison.shared`)
    forked_from: dict[str, Any] | None = None
    own: LeaderStats | None = None  # over every scenario of its own suite evaluation
    report: dict[str, Any] | None = None


def leader_curve(record: AuditRecord) -> tuple[list[tuple[int, float]], list[CurveMark]]:
    """The leader after each judged evaluation, and the messages delivered between them, from
    the event log (the same order the session lived it)."""
    items = {i.id: i for i in record.interventions}
    leader, count = 1.0, 0
    curve: list[tuple[int, float]] = []
    marks: list[CurveMark] = []
    for e in record.events:
        payload = e.payload if isinstance(e.payload, dict) else {}
        if e.kind in ("leader", "forked"):
            leader = _number(payload.get("speedup")) or leader
            if e.kind == "forked":
                curve.append((0, leader))
        elif e.kind == "verdict":
            count += 1
            if payload.get("verdict") == LEADER:
                leader = _number(payload.get("speedup")) or leader
            curve.append((count, leader))
        elif e.kind == "delivered":
            for ref in payload.get("intervention_ids") or []:
                item = items.get(record.row_id("intervention", ref)) if isinstance(ref, int) else None
                if item is not None:
                    marks.append(CurveMark(count, item.author, item.kind, item.text))
    return curve, marks


def arm_of(record: AuditRecord, color: str) -> Arm:
    curve, marks = leader_curve(record)
    leader = record.leader
    evaluation = record.suite_evaluation(leader) if leader is not None else None
    report = evaluation.report if evaluation is not None and isinstance(evaluation.report, dict) else None
    stats = leader_stats(report) if report is not None else None
    return Arm(record.session_id, record.session.title, record.session.agent, record.imported, color,
               leader.number if leader else None, record.session.leader_speedup, curve, marks, stats,
               record.forked_from, own=stats, report=report)


@dataclass
class HeatCell:
    scenario: str
    category: str
    ratio: float | None  # how many times faster arm a's leader is than arm b's
    color: str


@dataclass
class Comparison:
    arms: list[Arm]
    peer_names: list[str]
    categories: list[str]
    chart: dict[str, Any]
    heat: list[HeatCell] = field(default_factory=list)
    heat_a: int | None = None  # index into arms
    heat_b: int | None = None
    # The scenarios every arm with a leader evaluated; None when fewer than two arms have one.
    # Every ratio in the leaders table is over these when the arms' scenario sets differ.
    shared: list[str] | None = None
    same_sets: bool = True  # every arm evaluated the same scenarios
    gpus: list[str] = field(default_factory=list)  # the GPUs the leaders were measured on

    @property
    def warning(self) -> str:
        """What a reader must know before comparing the numbers, or ""."""
        if self.shared is not None and not self.shared:
            return ("These sessions share no scenario: their geomeans are over different scenario sets "
                    "and cannot be compared; each is shown over its own scenarios.")
        if len(self.gpus) > 1:
            return f"The leaders were measured on different GPUs ({', '.join(self.gpus)}): ratios are per GPU."
        return ""

    def peer_label(self, name: str) -> str:
        return peer_label(name)


def compare(records: list[AuditRecord], a: int = 0, b: int = 1) -> Comparison:
    """`a`, `b`: which two of the sessions the heatmap sets against each other."""
    arms = [arm_of(r, COLORS[i % len(COLORS)]) for i, r in enumerate(records[:MAX_SESSIONS])]
    peer_names: list[str] = []
    categories: list[str] = []
    for arm in arms:
        if arm.stats is None:
            continue
        peer_names += [p for p in arm.stats.peers if p not in peer_names]
        categories += [c for c in arm.stats.categories if c not in categories]
    comparison = Comparison(arms, peer_names, categories, overlay_chart(arms))
    restrict_to_shared(comparison)
    if len(arms) >= 2 and 0 <= a < len(arms) and 0 <= b < len(arms) and a != b:
        comparison.heat_a, comparison.heat_b = a, b
        comparison.heat = head_to_head(arms[a], arms[b])
    return comparison


def restrict_to_shared(comparison: Comparison) -> None:
    """Leaders whose sessions ran different scenarios are compared over the ones they share:
    each arm's `stats` become its numbers over those, `own` keeps its numbers over its own set."""
    measured = [arm for arm in comparison.arms if arm.own is not None and arm.report is not None]
    comparison.gpus = sorted({arm.own.gpu for arm in measured if arm.own is not None and arm.own.gpu})
    if len(measured) < 2:
        return
    sets = [set(arm.own.evaluated) for arm in measured if arm.own is not None]
    shared = set.intersection(*sets)
    comparison.shared = sorted(shared)
    comparison.same_sets = all(s == sets[0] for s in sets)
    if comparison.same_sets or not shared:
        return
    for arm in measured:
        assert arm.report is not None
        arm.stats = leader_stats(arm.report, only=shared)
    comparison.categories = [c for c in comparison.categories
                             if any(arm.stats and c in arm.stats.categories for arm in measured)]


def head_to_head(a: Arm, b: Arm) -> list[HeatCell]:
    if a.stats is None or b.stats is None:
        return []
    ratios: list[tuple[str, float | None]] = []
    for name in sorted(set(a.stats.times) | set(b.stats.times)):
        ta, tb = a.stats.times.get(name), b.stats.times.get(name)
        ratios.append((name, tb / ta if ta and tb else None))
    span = span_for([r for _, r in ratios])
    cats = _categories_of(a) | _categories_of(b)
    return [HeatCell(n, cats.get(n, ""), r, color_for(r, "pass" if r is not None else "fail", span))
            for n, r in ratios]


def _categories_of(arm: Arm) -> dict[str, str]:
    return arm.stats.scenario_categories if arm.stats is not None else {}


# -- the overlay chart ---------------------------------------------------------------------

W, H, LEFT, RIGHT, TOP, BOTTOM = 720, 260, 52, 16, 16, 36


def overlay_chart(arms: list[Arm]) -> dict[str, Any]:
    """Step lines of each arm's leader on one evaluation axis, a mark per delivered message."""
    n = max([1, *(x for arm in arms for x, _ in arm.curve)])
    top = max([1.0, *(y for arm in arms for _, y in arm.curve)]) * 1.1

    def sx(x: float) -> float:
        return round(LEFT + (W - LEFT - RIGHT) * x / n, 1)

    def sy(y: float) -> float:
        return round(TOP + (H - TOP - BOTTOM) * (1 - y / top), 1)

    lines = []
    for k, arm in enumerate(arms):
        y0 = arm.curve[0][1] if arm.curve and arm.curve[0][0] == 0 else 1.0
        d = [f"M{sx(0)},{sy(y0)}"]
        for x, y in arm.curve:
            d.append(f"H{sx(x)}V{sy(y)}")
        marks = [{"x": sx(m.after + 0.5 if m.after < n else m.after), "y": TOP + 6 + 9 * k,
                  "title": f"{arm.title}: after evaluation {m.after}, {m.author} {m.kind}: {m.text}"}
                 for m in arm.marks]
        lines.append({"d": " ".join(d), "color": arm.color, "title": arm.title, "marks": marks,
                      "end": {"x": sx(arm.curve[-1][0]) if arm.curve else sx(0),
                              "y": sy(arm.curve[-1][1]) if arm.curve else sy(y0)}})
    step = next((s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 500) if n / s <= 12), 1000)
    x_ticks = [{"x": sx(i), "label": str(i)} for i in range(0, n + 1, step)]
    ystep = nice_step(top)  # a bounded number of ticks, whatever an imported trace holds
    y_ticks = [{"y": sy(k * ystep), "label": f"{k * ystep:g}x"} for k in range(MAX_TICKS + 1) if k * ystep <= top]
    return {"width": W, "height": H, "left": LEFT, "right": W - RIGHT, "top": TOP, "bottom": H - BOTTOM,
            "lines": lines, "x_ticks": x_ticks, "y_ticks": y_ticks, "baseline_y": sy(1.0),
            "empty": not any(arm.curve for arm in arms)}
