"""The server's tables: a steering session, its append-only events, candidates and their
evaluations, triggers (why a session paused) and interventions (what a person sent).

Table classes live beside the names of their states; API schemas are in app/domain/schemas.py.
Every table is registered in SQLModel.metadata, which app/store/database.py hands to alembic."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- session states (app/domain/lifecycle.py holds the transitions) -----------------------------
CREATED = "created"
RUNNING = "running"
PAUSED = "paused"
INTERRUPTED = "interrupted"  # was running when the server stopped; one click resumes it
DONE = "done"  # the goal was met, as measured by the harness
STOPPED = "stopped"
FAILED = "failed"
SESSION_STATES = (CREATED, RUNNING, PAUSED, INTERRUPTED, DONE, STOPPED, FAILED)

# -- candidate kinds and states --------------------------------------------------------------
CUDA = "cuda"  # one .cu file implementing the problem's ABI
PYTHON_CPU = "python-cpu"  # a `module:function` kernel run on the CPU (tests and demos)
CANDIDATE_KINDS = (CUDA, PYTHON_CPU)

QUEUED = "queued"
EVALUATING = "evaluating"
EVALUATED = "evaluated"

# -- verdicts of the strict judge (app/domain/steering/session_judge.py) ------------------------------------
LEADER = "leader"
BACKUP = "backup"
REJECTED = "rejected"

# -- triggers, interventions -----------------------------------------------------------------
PLATEAU = "plateau"
DECLARED_LIMIT = "declared_limit"
SUSPICIOUS_WIN = "suspicious_win"
BUDGET = "budget"
MANUAL = "manual"
TRIGGER_KINDS = (PLATEAU, DECLARED_LIMIT, SUSPICIOUS_WIN, BUDGET, MANUAL)

QUESTION = "question"
INFORMATION = "information"
STEER = "steer"  # delivered at the next tool boundary
QUEUE = "queue"  # delivered when the agent's turn ends
PENDING = "pending"
DELIVERED = "delivered"
UNDELIVERED = "undelivered"  # the session ended before the agent reached a boundary to read it


class SteeringSession(SQLModel, table=True):
    """One campaign: an agent improving a kernel towards a goal measured by the harness."""

    __tablename__ = "session"

    id: int | None = Field(default=None, primary_key=True)
    title: str
    problem: str = "attention-forward"
    agent: str  # the agent backend's name (app/engine/agents/registry.py)
    agent_config: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    candidate_kind: str = CUDA
    baseline: str = ""  # a .cu path, or module:function for python-cpu sessions
    suite_filter: str | None = None  # harness --filter expression over the default suite
    scenarios: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON))  # custom list
    # The goal: geomean of `goal_metric` over ALL scenarios (hidden included) >= goal_target.
    goal_metric: str = "vs_baseline"
    goal_target: float | None = None
    thresholds: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    budget_steps: int | None = None
    budget_tokens: int | None = None
    budget_cost_usd: float | None = None
    budget_seconds: float | None = None
    used_steps: int = 0
    used_tokens: int = 0
    used_cost_usd: float = 0.0
    used_seconds: float = 0.0
    status: str = CREATED
    detail: str = ""  # what the session is doing or waiting for, or why it failed
    # Plain ids, not foreign keys: they would make a cycle with candidate/trigger -> session.
    leader_id: int | None = None
    leader_speedup: float | None = None  # the leader's geomean on all scenarios (goal metric)
    evaluations: int = 0
    window_start: int = 0  # evaluations count when steering last resumed (plateau window)
    open_trigger_id: int | None = None  # the trigger the current pause answers
    last_seq: int = 0  # sequence number of the newest event
    runner_state: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: dt.datetime = Field(default_factory=utcnow)
    updated_at: dt.datetime = Field(default_factory=utcnow)
    finished_at: dt.datetime | None = None
    # Imported from a trace file (app/domain/audit/trace_io.py): audited, never run or steered again.
    read_only: bool = False


class Event(SQLModel, table=True):
    """One entry of a session's append-only trace. `seq` counts from 1 within a session."""

    __table_args__ = (UniqueConstraint("session_id", "seq", name="uq_event_session_seq"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="session.id", ondelete="CASCADE", index=True)
    seq: int
    kind: str
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: dt.datetime = Field(default_factory=utcnow)


class Candidate(SQLModel, table=True):
    """A kernel an agent proposed; numbered from 1 within its session."""

    __table_args__ = (UniqueConstraint("session_id", "number", name="uq_candidate_session_number"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="session.id", ondelete="CASCADE", index=True)
    number: int
    author: str  # the agent (or person) that wrote it
    kind: str = CUDA
    title: str = ""
    notes: str = ""
    source: str
    parent_id: int | None = Field(default=None, foreign_key="candidate.id", ondelete="SET NULL")
    status: str = QUEUED
    verdict: str | None = None
    verdict_reason: str = ""
    speedup: float | None = None  # geomean vs baseline, all scenarios (hidden included)
    visible_speedup: float | None = None  # what the agent is shown
    passed: int = 0
    scenario_count: int = 0
    flags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    retime_speedup: float | None = None  # vs the previous leader, timed interleaved
    created_at: dt.datetime = Field(default_factory=utcnow)


class Evaluation(SQLModel, table=True):
    """One harness report on a candidate: its suite run, or its re-timing against the leader."""

    id: int | None = Field(default=None, primary_key=True)
    candidate_id: int = Field(foreign_key="candidate.id", ondelete="CASCADE", index=True)
    purpose: str = "suite"  # "suite" | "retime"
    against: str = ""  # what the speedups are relative to
    report: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    device: str = ""
    seconds: float = 0.0
    created_at: dt.datetime = Field(default_factory=utcnow)


class Trigger(SQLModel, table=True):
    """A moment that called for a person: why the session paused, with the evidence."""

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="session.id", ondelete="CASCADE", index=True)
    kind: str
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: dt.datetime = Field(default_factory=utcnow)
    resolved_at: dt.datetime | None = None
    resolution: str = ""


class Intervention(SQLModel, table=True):
    """A message a person (or the bank) sent to the agent, and what followed it."""

    __table_args__ = (Index("ix_intervention_session_status", "session_id", "status"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="session.id", ondelete="CASCADE")
    author: str
    kind: str = QUESTION
    mode: str = STEER
    text: str
    trigger_id: int | None = Field(default=None, foreign_key="trigger.id", ondelete="SET NULL")
    status: str = PENDING
    created_at: dt.datetime = Field(default_factory=utcnow)
    delivered_at: dt.datetime | None = None
    # Credit (DESIGN steering rules): leader gain in the K evaluations after delivery.
    leader_at_delivery: float | None = None
    evaluations_after: int = 0
    credited_gain: float | None = None


class EvaluationProfile(SQLModel, table=True):
    """The profile (harness/profile.py) of one suite evaluation, computed once from its report
    and kept beside it: the evaluation row is the cache key (one candidate, one GPU, one set of
    scenarios). The report stays as the harness wrote it; a profile of another schema is
    computed again (app/domain/profiles.py)."""

    __tablename__ = "evaluation_profile"

    evaluation_id: int = Field(foreign_key="evaluation.id", ondelete="CASCADE", primary_key=True)
    schema_version: int
    device: str = ""
    profile: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: dt.datetime = Field(default_factory=utcnow)
