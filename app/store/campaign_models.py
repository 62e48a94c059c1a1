"""Campaign tables: a campaign, its members (each one session), the board and the mutations
of evolution mode. Registered in app/store/database.py's MODEL_MODULES; migrated by 0004_campaigns."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel

from app.store.models import utcnow

BOARD_MODE = "board"  # N agents, one board, the campaign judge
EVOLUTION_MODE = "evolution"  # islands; each child from a parent the judge chose and one bank question
MODES = (BOARD_MODE, EVOLUTION_MODE)

# Campaign verdicts (the session's own verdict stays on the candidate).
DISCARDED = "discarded"
BACKUP = "backup"
LEADER = "leader"
CAMPAIGN_VERDICTS = (DISCARDED, BACKUP, LEADER)

# Campaign states: it runs while any member runs; it ends when its budget or goal is reached.
ACTIVE = "active"
FINISHED = "finished"


class Campaign(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    title: str
    mode: str = BOARD_MODE
    problem: str = "attention-forward"
    budget_evaluations: int | None = None  # over all members together
    goal_metric: str = "vs_baseline"
    goal_target: float | None = None
    memory_k: int | None = None  # the board an agent reads: the last K entries (None: unbounded)
    plateau_window: int = 6  # campaign evaluations without a new campaign leader
    min_leader_gain: float = 0.01
    islands: int = 1
    leader_session_id: int | None = None
    leader_candidate_id: int | None = None
    leader_speedup: float | None = None
    evaluations: int = 0
    last_leader_at: int = 0  # `evaluations` when the campaign leader last changed (plateau window)
    status: str = ACTIVE
    detail: str = ""
    read_only: bool = False  # imported from a campaign trace
    created_at: dt.datetime = Field(default_factory=utcnow)


class CampaignMember(SQLModel, table=True):
    __tablename__ = "campaign_member"

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", ondelete="CASCADE", index=True)
    session_id: int = Field(foreign_key="session.id", ondelete="CASCADE", unique=True)
    name: str  # "agent 1 (memory)"
    strategy: str = ""  # the layer (or free text) the agent starts on
    island: int = 0
    tried: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))  # strategies so far


class BoardEntry(SQLModel, table=True):
    """One judged candidate's conclusion: what changed, its effect per category, its verdicts."""

    __tablename__ = "board_entry"

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", ondelete="CASCADE", index=True)
    session_id: int = Field(foreign_key="session.id", ondelete="CASCADE")
    candidate_id: int | None = Field(default=None, foreign_key="candidate.id", ondelete="SET NULL")
    candidate_number: int
    author: str  # the member's name
    layer: str = ""  # the family layer the change belongs to ("" when unknown)
    knobs: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))  # changed knobs
    summary: str = ""  # one line: the knobs, or a summary of the diff
    effects: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))  # category -> x
    verdict: str = ""  # the session judge's
    campaign_verdict: str = ""  # discarded / backup / leader
    speedup: float | None = None
    created_at: dt.datetime = Field(default_factory=utcnow)


class Mutation(SQLModel, table=True):
    """Evolution mode: one child ordered from an agent, its parent and its question."""

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", ondelete="CASCADE", index=True)
    session_id: int = Field(foreign_key="session.id", ondelete="CASCADE")
    island: int = 0
    parent_candidate_id: int | None = Field(default=None, foreign_key="candidate.id", ondelete="SET NULL")
    parent_verdict: str = ""  # leader or backup: why the judge chose it
    question_id: int | None = None  # the bank question (plain id: the bank's table)
    question: str = ""
    reasons: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    intervention_id: int | None = Field(default=None, foreign_key="intervention.id", ondelete="SET NULL")
    child_candidate_id: int | None = Field(default=None, foreign_key="candidate.id", ondelete="SET NULL")
    created_at: dt.datetime = Field(default_factory=utcnow)
