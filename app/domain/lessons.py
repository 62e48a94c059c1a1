"""The app's side of lessons (lessons/): the facts of a session recorded here, of an imported
one, or of a trace file (a session's or a campaign's, plain or compressed), and distilling them
into the store.

Evidence names where it came from: a session recorded here by its id; a trace by the SHA-256 of
its session text (so an imported session and the file it came from are the same evidence, never
two) with the file's name, and the session id where the trace was imported here."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from app.domain.audit.record import AuditRecord, load_record
from app.domain.audit.trace_io import ParsedTrace, TraceFormatError, parse_trace, trace_text
from app.domain.campaigns.trace import parse_campaign
from app.domain.forks import fork_origin
from app.domain.sessions import get_session
from app.store.models import Candidate, Evaluation, Event, SteeringSession
from harness.profile import profile_report
from harness.report import EvaluationReport
from lessons import store
from lessons.distill import CandidateFacts, SessionFacts, arch_of_gpu, observations
from lessons.search import Situation
from lessons.store import ApplyResult
from lessons.use import priors, prompt_section, tokens

TRACE_FILE_LIMIT = 256 * 1024 * 1024  # a trace file read for distillation (decompressed)


def _times(report: dict[str, Any] | None) -> tuple[dict[str, float], int, str]:
    """(scenario -> time of each passed scenario, how many did not pass, the GPU) of a report."""
    if not isinstance(report, dict):
        return {}, 0, ""
    times: dict[str, float] = {}
    failed = 0
    for row in report.get("scenarios") or []:
        if not isinstance(row, dict):
            continue
        t = row.get("time_ms")
        if row.get("status") == "pass" and isinstance(t, (int, float)) and t > 0:
            times[str(row.get("scenario"))] = float(t)
        else:
            failed += 1
    return times, failed, str(report.get("gpu") or "")


def _diagnosis(report: dict[str, Any] | None) -> str:
    if not isinstance(report, dict):
        return ""
    try:
        return profile_report(EvaluationReport.from_dict(report)).diagnosis
    except Exception:  # an old or partial report: no diagnosis, the lesson stands without it
        return ""


@dataclass
class _Row:
    ref: int
    number: int
    parent: int | None
    title: str
    source: str
    verdict: str | None
    report: dict[str, Any] | None
    evaluation: int | None


def _facts(origin: dict[str, Any], session: dict[str, Any], rows: list[_Row]) -> SessionFacts:
    scenarios = {str(s.get("name")): {"category": s.get("category"), "head_dim": s.get("head_dim")}
                 for s in session.get("scenarios") or [] if isinstance(s, dict)}
    parents = {r.parent for r in rows if r.parent is not None}
    gpu = ""
    candidates = []
    for r in rows:
        times, failed, g = _times(r.report)
        gpu = gpu or g
        for row in (r.report or {}).get("scenarios") or []:  # a suite filter's scenarios the session list lacks
            if isinstance(row, dict) and row.get("scenario") not in scenarios:
                scenarios[str(row.get("scenario"))] = {"category": row.get("category"), "head_dim": None}
        candidates.append(CandidateFacts(r.number, r.ref, r.parent, r.title, r.source, r.verdict, times, failed,
                                         r.evaluation, _diagnosis(r.report) if r.ref in parents else ""))
    return SessionFacts(origin, str(session.get("problem") or ""), gpu, scenarios, candidates)


def facts_of_record(record: AuditRecord) -> SessionFacts:
    """A session in this database (recorded here or imported)."""
    origin: dict[str, Any] = {"session_id": record.session_id}
    if record.origin is not None:
        origin = {"trace": record.origin.file_name, "sha": record.origin.file_sha256[:16],
                  "session_id": record.session_id}
    rows = []
    for c in record.candidates:
        ev = record.suite_evaluation(c)
        rows.append(_Row(c.id or 0, c.number, c.parent_id, c.title, c.source, c.verdict,
                         ev.report if ev is not None else None, record.trace_id("evaluation", ev.id) if ev else None))
    session = {"problem": record.session.problem, "scenarios": record.session.scenarios}
    return _facts(origin, session, rows)


def facts_of_parsed(parsed: ParsedTrace, text: str, file_name: str) -> SessionFacts:
    """A session trace read from a file (not imported)."""
    suite: dict[int, tuple[int, dict[str, Any] | None]] = {}
    for _, e in parsed.rows["evaluation"]:
        if e.get("purpose") == "suite":
            suite[int(e["candidate_id"])] = (int(e["id"]), e.get("report"))
    rows = []
    for _, c in parsed.rows["candidate"]:
        ev = suite.get(int(c["id"]))
        rows.append(_Row(int(c["id"]), int(c["number"]), c.get("parent_id"), str(c.get("title") or ""),
                         str(c.get("source") or ""), c.get("verdict"), ev[1] if ev else None, ev[0] if ev else None))
    origin = {"trace": file_name, "sha": hashlib.sha256(text.encode()).hexdigest()[:16]}
    return _facts(origin, parsed.session, rows)


def facts_of_file(path: Path) -> list[SessionFacts]:
    """Every session a trace file holds: one for a session trace, one per member for a
    campaign's. Raises TraceFormatError naming the file."""
    try:
        text = trace_text(path.read_bytes(), TRACE_FILE_LIMIT)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read it ({exc.strerror})") from exc
    except TraceFormatError as exc:
        raise TraceFormatError(f"{path.name}: {exc}") from exc
    head = text.split("\n", 1)[0]
    try:
        if '"socratic-campaign"' in head:
            parsed = parse_campaign(text)
            return [facts_of_parsed(parse_trace(t), t, f"{path.name}#member{k}") for k, t in enumerate(parsed.texts)]
        return [facts_of_parsed(parse_trace(text), text, path.name)]
    except TraceFormatError as exc:
        raise TraceFormatError(f"{path.name}: {exc}") from exc


@dataclass
class Distilled:
    sessions: int = 0
    observations: int = 0
    result: ApplyResult = field(default_factory=ApplyResult)

    def to_dict(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "observations": self.observations, **self.result.to_dict()}


def distill_facts(db: Session, facts: Iterable[SessionFacts]) -> Distilled:
    out = Distilled()
    for f in facts:
        found = observations(f)
        out.sessions += 1
        out.observations += len(found)
        out.result.add(store.apply(db, found))
    return out


def distill_session(db: Session, session_id: int) -> Distilled:
    """Distil one session of this database (idempotent: its evidence is merged once)."""
    return distill_facts(db, [facts_of_record(load_record(db, session_id))])


def facts_of_candidates(db: Session, session_id: int, numbers: Iterable[int]) -> SessionFacts | None:
    """The facts of a few candidates of a session recorded here and of their parents, read from
    their own rows: what one judged candidate adds, without reading the session again (its events,
    its other candidates, every parent's profile). None for an imported session (its evidence is
    named by the trace: distil it whole)."""
    session = get_session(db, session_id)
    if session.read_only:
        return None
    wanted = list(db.exec(select(Candidate).where(Candidate.session_id == session_id,
                                                  col(Candidate.number).in_(sorted(set(numbers))))))
    ids = {c.id for c in wanted}
    parent_ids = {c.parent_id for c in wanted if c.parent_id is not None} - ids
    parents = list(db.exec(select(Candidate).where(col(Candidate.id).in_(parent_ids)))) if parent_ids else []
    every = [*parents, *wanted]
    suite: dict[int, Evaluation] = {}
    for ev in db.exec(select(Evaluation).where(col(Evaluation.candidate_id).in_([c.id for c in every]),
                                               Evaluation.purpose == "suite").order_by(col(Evaluation.id))):
        suite[ev.candidate_id] = ev  # the newest, as AuditRecord.suite_evaluation
    rows = []
    for c in sorted(every, key=lambda c: c.number):
        found = suite.get(c.id or 0)
        rows.append(_Row(c.id or 0, c.number, c.parent_id, c.title, c.source, c.verdict,
                         found.report if found is not None else None, found.id if found is not None else None))
    # The same origin as facts_of_record's for a session recorded here: one piece of evidence
    # merges once whichever of the two read it.
    return _facts({"session_id": session_id}, {"problem": session.problem, "scenarios": session.scenarios}, rows)


def distill_candidates(db: Session, session_id: int, numbers: Iterable[int]) -> Distilled:
    """Distil what these candidates of a session showed against their parents (after each judged
    candidate: the cost stays that of one candidate however long the session); an imported
    session is distilled whole."""
    facts = facts_of_candidates(db, session_id, numbers)
    if facts is None:
        return distill_session(db, session_id)
    return distill_facts(db, [facts])


def distill_files(db: Session, paths: Iterable[Path]) -> Distilled:
    return distill_facts(db, [f for p in paths for f in facts_of_file(p)])


def session_gpu(db: Session, session_id: int) -> str:
    """The GPU the session's newest evaluation ran on ("" before its first)."""
    row = db.exec(select(Evaluation).join(Candidate, col(Candidate.id) == col(Evaluation.candidate_id))
                  .where(Candidate.session_id == session_id).order_by(col(Evaluation.id).desc()).limit(1)).first()
    return str((row.report or {}).get("gpu") or "") if row is not None and isinstance(row.report, dict) else ""


def situation_of(session: SteeringSession, categories: Iterable[str], gpu: str = "") -> Situation:
    """Where a session stands, as lessons are matched to it: its architecture (unknown before a
    first evaluation names the GPU), its problem, the categories of its scenarios."""
    arch = arch_of_gpu(gpu) if gpu else ""
    return Situation(arch if arch != "unknown" else "", session.problem, tuple(sorted(set(categories))))


def session_situation(db: Session, session_id: int, categories: Iterable[str]) -> Situation:
    return situation_of(get_session(db, session_id), categories, session_gpu(db, session_id))


FAILURE_NOTES = 5  # the newest rejected candidates of the lineage a model's prompt recalls


@dataclass
class Knowledge:
    """What a session's agent is given at its start: the prompt's lessons and failure notes, the
    offline agent's priors, and what choosing them cost (seconds, tokens) for the audit."""

    prompt: str
    priors: list[dict[str, Any]]
    lessons: list[int]
    tokens: int
    seconds: float

    def event(self) -> dict[str, Any]:
        return {"what": "prompt", "seconds": round(self.seconds, 4), "tokens": self.tokens, "lessons": self.lessons,
                "priors": len(self.priors)}


def lineage_failures(db: Session, session: SteeringSession) -> list[str]:
    """Short notes on the newest rejected candidates of the session and of the one it was forked from."""
    ids = [session.id or 0]
    first = list(db.exec(select(Event).where(Event.session_id == session.id).order_by(col(Event.seq)).limit(4)))
    origin = fork_origin(first)
    if origin and isinstance(origin.get("from_session"), int):
        ids.append(origin["from_session"])
    rows = db.exec(select(Candidate).where(col(Candidate.session_id).in_(ids), Candidate.verdict == "rejected")
                   .order_by(col(Candidate.id).desc()).limit(FAILURE_NOTES)).all()
    return [f"- session {c.session_id} #{c.number} {c.title[:80]!r}: {(c.verdict_reason or '')[:160]}" for c in rows]


def session_knowledge(db: Session, session: SteeringSession, categories: Iterable[str], budget: int) -> Knowledge:
    """Chosen once, at the start of a session's runner (never a search before each step)."""
    started = time.monotonic()
    situation = situation_of(session, categories, session_gpu(db, session.id or 0))
    pool = store.list_lessons(db, ("proposed", "active"))
    section = prompt_section(pool, situation, budget) if budget > 0 else None
    notes = lineage_failures(db, session)
    parts = [section.text] if section is not None and section.text else []
    if notes:
        parts.append("Rejected earlier in this lineage (do not repeat them unchanged):\n" + "\n".join(notes))
    prompt = "\n\n".join(parts)
    return Knowledge(prompt, priors(pool, situation), section.lessons if section else [], tokens(prompt),
                     time.monotonic() - started)
