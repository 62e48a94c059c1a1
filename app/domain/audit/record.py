"""One session's whole trace, loaded once: the session row, its candidates, evaluations,
triggers, interventions and events, the baseline kernel's source, and the ids as the trace
knows them. Every audit view and the exporter read this; none of them writes.

Event payloads hold row ids (candidate_id, trigger_id, ...). For a session recorded here those
are the database ids; for an imported session they are the ids of the trace it came from,
kept verbatim, and TraceImport maps them to rows. `trace_id` and `row_id` hide the difference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import defer
from sqlmodel import Session, col, select

from app.domain.forks import fork_origin, forks_of
from app.domain.sessions import get_session
from app.store.models import (
    PYTHON_CPU,
    Candidate,
    Evaluation,
    Event,
    Intervention,
    SteeringSession,
    Trigger,
)
from app.store.trace_models import TraceImport


@dataclass
class AuditRecord:
    session: SteeringSession
    candidates: list[Candidate]  # by number
    evaluations: list[Evaluation]  # in the order they were stored
    triggers: list[Trigger]
    interventions: list[Intervention]
    events: list[Event]  # by seq
    baseline_source: str | None  # None when the baseline file is not on this machine
    origin: TraceImport | None = None  # set for imported sessions
    forks: list[dict[str, Any]] = field(default_factory=list)  # sessions forked from this one (app/engine/fork.py)
    _to_trace: dict[str, dict[int, int]] = field(default_factory=dict)
    _to_row: dict[str, dict[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind in ("candidate", "evaluation", "trigger", "intervention", "session"):
            mapping = self.origin.trace_ids(kind) if self.origin is not None else {}
            self._to_trace[kind] = mapping
            self._to_row[kind] = {t: r for r, t in mapping.items()}

    @property
    def session_id(self) -> int:
        return self.session.id or 0

    @property
    def forked_from(self) -> dict[str, Any] | None:
        """Where this session was forked from (app/engine/fork.py), or None."""
        return fork_origin(self.events)

    @property
    def imported(self) -> bool:
        return self.origin is not None

    def trace_id(self, kind: str, row_id: int | None) -> int | None:
        """The id the trace uses for a row (the row's own id unless it was imported)."""
        if row_id is None:
            return None
        return self._to_trace[kind].get(row_id, row_id) if self.origin is not None else row_id

    def row_id(self, kind: str, trace_id: int | None) -> int | None:
        """The row an id found in an event payload stands for."""
        if trace_id is None:
            return None
        return self._to_row[kind].get(trace_id) if self.origin is not None else trace_id

    # -- candidates --------------------------------------------------------------------------

    def candidate(self, number: int) -> Candidate | None:
        return next((c for c in self.candidates if c.number == number), None)

    def candidate_by_row(self, row_id: int | None) -> Candidate | None:
        if row_id is None:
            return None
        return next((c for c in self.candidates if c.id == row_id), None)

    def parent_of(self, c: Candidate) -> Candidate | None:
        return self.candidate_by_row(c.parent_id)

    @property
    def leader(self) -> Candidate | None:
        return self.candidate_by_row(self.session.leader_id)

    def suite_evaluation(self, c: Candidate) -> Evaluation | None:
        """The candidate's newest full-suite evaluation (against the baseline)."""
        found = [e for e in self.evaluations if e.candidate_id == c.id and e.purpose == "suite"]
        return found[-1] if found else None

    def source_of(self, number: int | None) -> str | None:
        """A candidate's source, or the baseline's for None."""
        if number is None:
            return self.baseline_source
        c = self.candidate(number)
        return c.source if c is not None else None


def baseline_source_of(session: SteeringSession) -> str | None:
    """The baseline as this machine has it: the module:function of a python-cpu session, or
    the text of the listed kernel it names (None for a name not on the list: app/domain/kernel_names.py)."""
    if session.candidate_kind == PYTHON_CPU:
        return session.baseline
    from app.domain.kernel_names import kernel_source

    return kernel_source(session.baseline) if session.baseline else None


def load_record(db: Session, session_id: int, reports: bool = True) -> AuditRecord:
    """Everything about one session. Raises app.domain.sessions.NotFound.

    reports=False leaves out the harness reports of the evaluations (a full-suite report is
    tens of kilobytes; views that do not draw scenarios skip them): reading one then raises."""
    session = get_session(db, session_id)
    candidates = list(db.exec(select(Candidate).where(Candidate.session_id == session_id)
                              .order_by(col(Candidate.number))).all())
    ids = [c.id for c in candidates]
    query = select(Evaluation).where(col(Evaluation.candidate_id).in_(ids)).order_by(col(Evaluation.id))
    if not reports:
        query = query.options(defer(Evaluation.report, raiseload=True))  # type: ignore[arg-type]
    evaluations = list(db.exec(query).all()) if ids else []
    triggers = list(db.exec(select(Trigger).where(Trigger.session_id == session_id)
                            .order_by(col(Trigger.id))).all())
    interventions = list(db.exec(select(Intervention).where(Intervention.session_id == session_id)
                                 .order_by(col(Intervention.id))).all())
    events = list(db.exec(select(Event).where(Event.session_id == session_id).order_by(col(Event.seq))).all())
    origin = db.get(TraceImport, session_id)
    baseline = origin.baseline_source if origin is not None else baseline_source_of(session)
    return AuditRecord(session, candidates, evaluations, triggers, interventions, events, baseline, origin,
                       forks_of(db, session_id))
