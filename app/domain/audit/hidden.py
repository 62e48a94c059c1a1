"""Hidden scenarios as people see them: how many a session's evaluations hold, and each
candidate's aggregate over them (scenarios, passed, geomean over the baseline), read from its
suite report; and how many scenarios each candidate's "all" geomean is over (`timed_counts`).
The pages that show "all" and "visible" show this beside them. The agent never reads it: its
tools show visible results and count hidden scenarios without naming them
(app/engine/tools/readouts.py); this module names none either, it only counts and aggregates.

A report is read once per evaluation (reports are never rewritten); a session page asks
again after every batch of events, and finds what it has read in `_SEEN`."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from app.store.models import Candidate, Evaluation

SUITE = "suite"
# per database engine (evaluation ids are a database's own): (evaluation id, candidate id) -> part
_SEEN: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[int, int], _Read]] = weakref.WeakKeyDictionary()
_SEEN_LOCK = threading.Lock()
_SEEN_MAX = 8192  # evaluations remembered per database


@dataclass(frozen=True)
class HiddenPart:
    """One evaluation's hidden scenarios: how many, how many passed, their geomean speedup over
    the baseline (None when none was timed)."""

    scenarios: int
    passed: int
    vs_baseline: float | None
    all_scenarios: int  # every scenario of the evaluation, hidden included


@dataclass(frozen=True)
class HiddenResults:
    """A session's hidden scenarios: the count (of its latest suite evaluation that has some)
    and each evaluated candidate's aggregate, by candidate number."""

    scenarios: int
    all_scenarios: int
    by_number: dict[int, HiddenPart]

    @property
    def visible(self) -> int:
        return self.all_scenarios - self.scenarios


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _speedup(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def hidden_part(report: Any) -> HiddenPart | None:
    """The hidden scenarios of a stored report (`EvaluationReport.to_dict()`); None when it has
    none. An imported report may hold anything: only counts and positive numbers are believed."""
    if not isinstance(report, dict):
        return None
    geomean = report.get("geomean")
    part = geomean.get("hidden") if isinstance(geomean, dict) else None
    every = geomean.get("all") if isinstance(geomean, dict) else None
    if isinstance(part, dict) and _count(part.get("scenarios")):
        total = _count(every.get("scenarios")) if isinstance(every, dict) else 0
        return HiddenPart(_count(part.get("scenarios")), _count(part.get("passed")), _speedup(part.get("vs_baseline")),
                          max(total, _count(part.get("scenarios"))))
    scenarios = report.get("scenarios")
    if not isinstance(scenarios, list):
        return None
    hidden = [r for r in scenarios if isinstance(r, dict) and r.get("hidden") is True]
    if not hidden:
        return None
    return HiddenPart(len(hidden), sum(1 for r in hidden if r.get("passed") is True), None, len(scenarios))


@dataclass(frozen=True)
class _Read:
    """What the pages take from one suite report, read once."""

    hidden: HiddenPart | None
    timed: int | None  # the scenarios behind the "all" geomean (None: a report that does not say)
    scenarios: int


def _read(report: Any) -> _Read:
    every = report.get("geomean", {}).get("all") if isinstance(report, dict) and isinstance(
        report.get("geomean"), dict) else None
    rows = report.get("scenarios") if isinstance(report, dict) else None
    scenarios = (_count(every.get("scenarios")) if isinstance(every, dict)
                 else len(rows) if isinstance(rows, list) else 0)
    timed = _count(every.get("timed")) if isinstance(every, dict) and "timed" in every else None
    return _Read(hidden_part(report), timed, scenarios)


def _reading(db: Session, evaluation_id: int, candidate_id: int) -> _Read:
    key = (evaluation_id, candidate_id)
    engine = db.get_bind().engine
    with _SEEN_LOCK:
        seen = _SEEN.setdefault(engine, OrderedDict())
        if key in seen:
            seen.move_to_end(key)
            return seen[key]
    report = db.exec(select(Evaluation.report).where(Evaluation.id == evaluation_id)).first()
    found = _read(report)
    with _SEEN_LOCK:
        seen[key] = found
        while len(seen) > _SEEN_MAX:
            seen.popitem(last=False)
    return found


def _latest(db: Session, session_id: int) -> dict[int, tuple[int, int]]:
    """Candidate number -> (its latest suite evaluation's id, the candidate's id)."""
    rows = db.exec(select(Candidate.number, Candidate.id, Evaluation.id)
                   .join(Evaluation, col(Evaluation.candidate_id) == col(Candidate.id))
                   .where(Candidate.session_id == session_id, Evaluation.purpose == SUITE)
                   .order_by(col(Evaluation.id))).all()
    latest: dict[int, tuple[int, int]] = {}
    for number, candidate_id, evaluation_id in rows:
        latest[number] = (evaluation_id or 0, candidate_id or 0)
    return latest


def timed_counts(db: Session, session_id: int) -> dict[int, tuple[int, int]]:
    """Candidate number -> (scenarios its "all" geomean is over, scenarios evaluated), from its
    latest suite report; a report that does not count them is left out."""
    found = {n: _reading(db, e, c) for n, (e, c) in _latest(db, session_id).items()}
    return {n: (r.timed, r.scenarios) for n, r in found.items() if r.timed is not None}


def hidden_results(db: Session, session_id: int) -> HiddenResults | None:
    """The session's hidden scenarios and each candidate's aggregate over them; None when its
    suite evaluations hold no hidden scenario (or it has none yet)."""
    latest = _latest(db, session_id)
    parts = {n: p for n, (e, c) in latest.items() if (p := _reading(db, e, c).hidden) is not None}
    if not parts:
        return None
    newest = parts[max(parts, key=lambda n: latest[n][0])]
    return HiddenResults(newest.scenarios, newest.all_scenarios, parts)
