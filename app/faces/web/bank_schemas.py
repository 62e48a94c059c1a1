"""What the question bank's JSON API accepts and returns (app/faces/web/bank_api.py), and the
conversion of bank questions into it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.domain.schemas import InputModel
from question_bank import agent_tool, curation
from question_bank.auto_ask import AutoAskPolicy
from question_bank.bank_file import LAYERS, TRIGGERS
from question_bank.evidence import NO_EVIDENCE, EvidenceStats
from question_bank.models import BankQuestion


class QuestionIn(InputModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=2000)
    kind: Literal["question", "information"] = "question"
    triggers: list[str] = Field(description=f"some of: {', '.join(TRIGGERS)}")
    layers: list[str] = Field(description=f"some of: {', '.join(LAYERS)}")
    problem: str | None = Field(None, description="scope: the problem (e.g. attention-forward); none for any")
    archs: list[str] = Field(default_factory=list, description="scope: GPU archs such as sm_90; empty for any")
    hypothesis: str = Field("", description="for curators: what the question makes the agent consider")
    check: str = Field("", description="for curators: the measurement that answers it")
    provenance: str = ""
    key: str | None = Field(None, description="stable name in YAML files; derived from the text if absent")

    def draft(self) -> curation.QuestionDraft:
        return curation.QuestionDraft(**self.model_dump())


class QuestionPatch(InputModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, max_length=2000)
    kind: Literal["question", "information"] | None = None
    triggers: list[str] | None = None
    layers: list[str] | None = None
    problem: str | None = None
    archs: list[str] | None = None
    hypothesis: str | None = None
    check: str | None = None
    provenance: str | None = None
    key: str | None = None

    @field_validator("text", "kind", "triggers", "layers", "archs", "hypothesis", "check", "provenance")
    @classmethod
    def _not_null(cls, v: Any) -> Any:
        """Only `problem` and `key` may be cleared with null; a field left out keeps its value."""
        if v is None:
            raise ValueError("may not be null (leave the field out to keep its value)")
        return v


class Evidence(BaseModel):
    uses: int
    credited: int
    geomean_gain: float
    interval: tuple[float, float] | None = None  # 95% interval of geomean_gain; None below 2 credited
    hit_rate: float
    best_gain: float


class QuestionPublic(BaseModel):
    id: int
    key: str
    text: str
    kind: str
    triggers: list[str]
    layers: list[str]
    problem: str | None
    archs: list[str]
    hypothesis: str
    check: str
    provenance: str
    status: str
    merged_into_id: int | None
    evidence: Evidence
    score: float | None = None
    reasons: list[str] = []


class MergeIn(InputModel):
    model_config = ConfigDict(extra="forbid")

    keep_id: int
    duplicate_ids: list[int] = Field(min_length=1)


class PromoteIn(InputModel):
    """A message sent in a session, into the bank. Text and kind default to the message's own."""

    model_config = ConfigDict(extra="forbid")

    session_id: int
    intervention_id: int
    text: str | None = Field(None, max_length=2000)
    kind: Literal["question", "information"] | None = None
    triggers: list[str]
    layers: list[str]
    problem: str | None = None
    archs: list[str] = Field(default_factory=list)
    hypothesis: str = ""
    check: str = ""
    promoted_by: str = Field("person", min_length=1, max_length=80)

    def draft(self) -> curation.QuestionDraft:
        """The question to add; empty text, kind and problem take the message's and session's own."""
        return curation.QuestionDraft(
            text=self.text or "", kind=self.kind or "", triggers=list(self.triggers), layers=list(self.layers),
            problem=self.problem, archs=list(self.archs), hypothesis=self.hypothesis, check=self.check,
        )


class PromotePublic(BaseModel):
    question: QuestionPublic
    created: bool
    uses_linked: int


class ImportPublic(BaseModel):
    created: list[str]
    updated: list[str]
    unchanged: list[str]


class EvidenceRowPublic(BaseModel):
    question_id: int | None
    key: str | None
    text: str
    kind: str
    status: str | None
    sessions: int
    evidence: Evidence


class ControlPublic(BaseModel):
    """The silent control: pauses resumed without a message, credited as messages are."""

    sessions: int
    evidence: Evidence


class EvidencePublic(BaseModel):
    overall: dict[str, Evidence]
    control: ControlPublic
    by_author: list[dict[str, Any]]
    questions: list[EvidenceRowPublic]
    unbanked: list[EvidenceRowPublic]


class AutoAskIn(InputModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["off", "after_idle", "at_once"]
    idle_seconds: float = Field(120.0, gt=0, le=86400)
    max_in_a_row: int = Field(3, ge=1, le=20, description="bank questions in a row without a person's message")


class AutoAskPublic(BaseModel):
    session_id: int
    mode: str
    idle_seconds: float
    max_in_a_row: int
    description: str

    @classmethod
    def of(cls, session_id: int, policy: AutoAskPolicy) -> AutoAskPublic:
        return cls(session_id=session_id, mode=policy.mode, idle_seconds=policy.idle_seconds,
                   max_in_a_row=policy.max_in_a_row, description=policy.describe())


class ConsultIn(InputModel):
    """The agent's tool over HTTP (for external agents): a situation in, a few questions out."""

    model_config = ConfigDict(extra="forbid")

    situation: str = Field(min_length=1, max_length=agent_tool.MAX_SITUATION)
    trigger: Literal["plateau", "declared_limit", "suspicious_win", "budget", "manual"] = "manual"
    layers_tried: list[str] = Field(default_factory=list)
    limit: int = Field(3, ge=1, le=5)
    session_id: int | None = None


def evidence_of(stats: EvidenceStats | None) -> Evidence:
    s = stats or NO_EVIDENCE
    return Evidence(uses=s.uses, credited=s.credited, geomean_gain=s.geomean_gain, interval=s.interval,
                    hit_rate=s.hit_rate, best_gain=s.best_gain)


def public(q: BankQuestion, stats: EvidenceStats | None = None, score: float | None = None,
           reasons: tuple[str, ...] | list[str] = ()) -> QuestionPublic:
    d = q.to_dict()
    return QuestionPublic(**d, evidence=evidence_of(stats), score=score, reasons=list(reasons))
