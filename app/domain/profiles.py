"""A candidate's profile (harness/profile.py: what bounds the kernel, per scenario and category,
with findings that name the kernel family's layer and knob), computed from its stored suite
evaluation once and kept in `evaluation_profile`, keyed by that evaluation (one candidate on
one GPU over one set of scenarios). An agent reads the visible profile only (hidden scenarios
counted, never named). A profile reads a report; it never changes a verdict."""

from __future__ import annotations

from sqlmodel import Session, col, select

from app.store.models import Candidate, Evaluation, EvaluationProfile, SteeringSession
from harness.profile import PROFILE_SCHEMA, Finding, Profile, profile_report
from harness.report import EvaluationReport


def suite_evaluation(db: Session, candidate_id: int) -> Evaluation | None:
    """The candidate's newest suite evaluation (its re-times are against the leader, not it)."""
    return db.exec(select(Evaluation).where(Evaluation.candidate_id == candidate_id, Evaluation.purpose == "suite")
                   .order_by(col(Evaluation.id).desc())).first()


def evaluation_profile(db: Session, evaluation: Evaluation, *, store: bool = True) -> Profile | None:
    """The evaluation's profile: the stored one when its schema is current, else computed from
    the report and (with `store`) kept in the caller's transaction (a unit of work commits it).
    None for a report that is not one the harness writes (an imported trace may hold anything):
    every reader (page, route, tool, the bank) shows no profile rather than failing."""
    assert evaluation.id is not None
    row = db.get(EvaluationProfile, evaluation.id)
    if row is not None and row.schema_version == PROFILE_SCHEMA:
        return Profile.from_dict(row.profile)
    try:
        profile = profile_report(EvaluationReport.from_dict(evaluation.report))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if store:
        row = row or EvaluationProfile(evaluation_id=evaluation.id, schema_version=PROFILE_SCHEMA)
        row.schema_version, row.device, row.profile = PROFILE_SCHEMA, evaluation.device, profile.to_dict()
        db.add(row)
        db.flush()
    return profile


def candidate_profile(db: Session, candidate: Candidate, *, store: bool = True) -> Profile | None:
    """The profile of the candidate's suite evaluation, or None when it has none (not evaluated
    yet, cancelled). An imported (read-only) session's profile is computed, not stored."""
    if candidate.id is None:
        return None
    evaluation = suite_evaluation(db, candidate.id)
    if evaluation is None:
        return None
    session = db.get(SteeringSession, candidate.session_id)
    return evaluation_profile(db, evaluation, store=store and not (session is not None and session.read_only))


def leader_findings(db: Session, session: SteeringSession) -> list[Finding]:
    """What the profile of the session's leader points at, most at stake first (none without a
    leader or an evaluation): the pause's situation as the bank matches questions to it."""
    profile = leader_profile(db, session)
    return list(profile.findings) if profile is not None else []


def leader_profile(db: Session, session: SteeringSession) -> Profile | None:
    """The profile of the session's leader (read, or computed without storing: a page's read)."""
    if session.leader_id is None:
        return None
    leader = db.get(Candidate, session.leader_id)
    return candidate_profile(db, leader, store=False) if leader is not None else None
