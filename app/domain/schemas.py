"""API schemas: what clients send (Create/Update/Action) and what they get back (Public).
Validation happens here, before anything is written; app/faces/web/api.py turns failures into
422 responses with a readable message."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.domain.steering.goal import GOAL_METRICS
from app.domain.steering.triggers import Thresholds
from app.store.input_limits import INT32_MAX, MAX_DEPTH, check_json_value

# Upper bounds that keep every number inside what the database and the runner handle.
MAX_STEPS = 1_000_000
MAX_TOKENS = INT32_MAX  # an INTEGER column, 32 bits on PostgreSQL
MAX_COST_USD = 1_000_000.0
MAX_SECONDS = 365 * 24 * 3600.0
MAX_GOAL = 10_000.0  # a speedup
MAX_CONFIG_TEXT = 1_000_000  # characters in one text of agent_config (a script's inline kernel source)


class InputModel(BaseModel):
    """What clients send: unknown fields refused, only finite numbers, and before any field is
    looked at the whole input is checked against app/store/input_limits.py (no NUL, nesting at most
    MAX_DEPTH deep, integers of 64 bits, texts of bounded length)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any) -> Any:
        check_json_value(data, cls.__name__, max_depth=MAX_DEPTH, max_text=MAX_CONFIG_TEXT)
        return data


class ThresholdsIn(InputModel):

    plateau_window: int = Field(default=Thresholds.plateau_window, ge=1, le=1000)
    plateau_min_gain: float = Field(default=Thresholds.plateau_min_gain, ge=0, le=10)
    suspicious_jump: float = Field(default=Thresholds.suspicious_jump, gt=1, le=1e6)
    min_leader_gain: float = Field(default=Thresholds.min_leader_gain, ge=0, le=10)
    credit_window: int = Field(default=Thresholds.credit_window, ge=1, le=1000)
    declared_limit_words: bool = Thresholds.declared_limit_words


class BudgetIn(InputModel):
    steps: int | None = Field(default=None, ge=1, le=MAX_STEPS, description="agent steps")
    tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    cost_usd: float | None = Field(default=None, gt=0, le=MAX_COST_USD)
    seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS, description="running time, pauses excluded")


class ScenarioIn(InputModel):
    """A custom scenario (python-cpu sessions use small ones)."""

    name: str = Field(min_length=1, max_length=120)
    category: str = Field(default="custom", max_length=40)
    batch: int = Field(ge=1, le=65535)
    seqlen_q: int = Field(ge=1, le=1 << 20)
    seqlen_k: int = Field(ge=1, le=1 << 20)
    heads_q: int = Field(ge=1, le=65535)
    heads_kv: int = Field(ge=1, le=65535)
    head_dim: int = Field(ge=1, le=1024)
    causal: bool = False
    hidden: bool = False
    softmax_scale: float | None = Field(default=None, gt=0, description="trial 1's scale; null: head_dim^-0.5")


class SessionCreate(InputModel):
    title: str = Field(min_length=1, max_length=200)
    agent: str | None = Field(default=None, min_length=1, max_length=80,
                       description="a registered agent backend; when left out: scripted if agent_config names a "
                                   "script or steps, else claude with ANTHROPIC_API_KEY set, else offline")
    agent_config: dict[str, Any] = Field(
        default_factory=dict, description='backend options, e.g. {"script": "cpu-demo"}, {"model": '
                                          '"claude-sonnet-5-5"} or {"seed": 3, "focus": "memory"}'
    )
    candidate_kind: Literal["cuda", "python-cpu"] | None = Field(
        default=None, description="default: the script's kind, else cuda"
    )
    baseline: str | None = Field(default=None, max_length=200,
                                 description="a kernel the server lists by name (`baseline`, `gallery/NAME`), "
                                             "never a path; module:function for python-cpu")
    suite_filter: str | None = Field(default=None, max_length=1000,
                                     description="harness --filter expression over the default suite")
    scenarios: list[ScenarioIn] | None = Field(default=None, min_length=1, max_length=256,
                                               description="custom scenarios")
    goal_metric: str = Field(default="vs_baseline", max_length=40)
    goal_target: float | None = Field(default=None, gt=0, le=MAX_GOAL,
                                      description="stop when the leader's geomean reaches this")
    thresholds: ThresholdsIn = Field(default_factory=ThresholdsIn)
    budget: BudgetIn = Field(default_factory=BudgetIn)
    start: bool = Field(default=True, description="start running at once")

    @field_validator("title")
    @classmethod
    def _title_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the title must not be blank")
        return v.strip()

    @field_validator("goal_metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        if v not in GOAL_METRICS:
            raise ValueError(f"unknown goal metric {v!r}; choose one of {', '.join(GOAL_METRICS)}")
        return v


class SessionUpdate(InputModel):
    """Change a session's budgets, thresholds or goal (e.g. raise a spent budget)."""

    title: str | None = Field(default=None, min_length=1, max_length=200)
    goal_target: float | None = Field(default=None, gt=0, le=MAX_GOAL)
    thresholds: ThresholdsIn | None = None
    budget: BudgetIn | None = None


class InterventionCreate(InputModel):
    text: str = Field(min_length=1, max_length=10_000)
    kind: Literal["question", "information"] = "question"
    mode: Literal["steer", "queue"] = "steer"
    author: str = Field(default="person", min_length=1, max_length=80)
    resume: bool = Field(default=True, description="resume the session if it is paused")

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the message must not be blank")
        return v.strip()


class ActionIn(InputModel):
    author: str = Field(default="person", min_length=1, max_length=80)
    reason: str = Field(default="", max_length=2000)


class SessionPublic(BaseModel):
    id: int
    title: str
    problem: str
    agent: str
    agent_config: dict[str, Any]
    candidate_kind: str
    baseline: str
    suite_filter: str | None
    status: str
    detail: str
    goal: str
    goal_metric: str
    goal_target: float | None
    thresholds: dict[str, Any]
    budget: dict[str, Any]
    used: dict[str, Any]
    leader_id: int | None
    leader_number: int | None
    leader_speedup: float | None
    evaluations: int
    candidates: int
    interventions: int
    open_trigger_id: int | None
    last_seq: int
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None


class CandidatePublic(BaseModel):
    id: int
    session_id: int
    number: int
    author: str
    kind: str
    title: str
    notes: str
    parent_number: int | None
    status: str
    verdict: str | None
    verdict_reason: str
    speedup: float | None
    visible_speedup: float | None
    retime_speedup: float | None
    passed: int
    scenario_count: int
    flags: list[str]
    created_at: dt.datetime


class CandidateDetail(CandidatePublic):
    source: str
    evaluations: list[dict[str, Any]]


class EventPublic(BaseModel):
    seq: int
    kind: str
    payload: dict[str, Any]
    created_at: dt.datetime


class TriggerPublic(BaseModel):
    id: int
    kind: str
    summary: str
    evidence: dict[str, Any]
    created_at: dt.datetime
    resolved_at: dt.datetime | None
    resolution: str
    suggestions: list[dict[str, str]] = []


class InterventionPublic(BaseModel):
    id: int
    author: str
    kind: str
    mode: str
    text: str
    trigger_id: int | None
    status: str
    created_at: dt.datetime
    delivered_at: dt.datetime | None
    leader_at_delivery: float | None
    evaluations_after: int
    credited_gain: float | None


class AgentPublic(BaseModel):
    name: str
    description: str
    scripts: list[dict[str, str]] = []
