"""The bank's vocabulary (kinds, triggers, layers) and its tables, all prefixed `bank_`.
The app's database imports this module so that these tables share its metadata."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel


class Kind(StrEnum):
    """A question names a hypothesis; information only carries facts. The findings say gains
    followed questions, so the bank keeps both and compares their evidence."""

    QUESTION = "question"
    INFORMATION = "information"


class Trigger(StrEnum):
    """The moments a bank question suits. `any` suits every pause."""

    PLATEAU = "plateau"
    DECLARED_LIMIT = "declared_limit"
    SUSPICIOUS_WIN = "suspicious_win"
    BUDGET = "budget"
    ANY = "any"


# The kinds of pause a session can be in. `manual` is a person's pause: no trigger to fit.
PAUSE_TRIGGERS: tuple[str, ...] = ("plateau", "declared_limit", "suspicious_win", "budget", "manual")


class Layer(StrEnum):
    """Layers of an attention kernel a question can move the agent to."""

    MEMORY = "memory"              # global/shared traffic, layouts, bank conflicts, L2
    TENSOR_CORES = "tensor_cores"  # which MMA instructions, shapes, utilization
    PIPELINE = "pipeline"          # async copies, overlap, barriers, warp specialization
    SCHEDULING = "scheduling"      # grid, tile-to-SM mapping, occupancy, split-KV, launch
    MASKING = "masking"            # causal and ragged boundaries
    PRECISION = "precision"        # accumulators, rescaling, conversions, error budget
    MEASUREMENT = "measurement"    # timing, roofline, verification of a claim
    ALGORITHM = "algorithm"        # formulation, loop order, restructuring


class Status(StrEnum):
    ACTIVE = "active"
    RETIRED = "retired"


class Author(StrEnum):
    """Who used a question: a person, the bank itself (auto-ask), or the agent (its tool)."""

    PERSON = "person"
    BANK = "bank"
    AGENT = "agent"


def utcnow() -> datetime:
    """Aware UTC, as SQLModel stores and returns datetimes."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """Accept aware or naive (taken as UTC) datetimes; return aware UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def slugify(text: str, max_len: int = 48) -> str:
    """A readable, stable key from a question's text: 'what-bounds-this-kernel-now'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_len:
            break
        slug = candidate
    return slug or "question"


def normalize_text(text: str) -> str:
    """The form used to recognize the same message sent twice."""
    return " ".join(text.lower().split())


class BankQuestion(SQLModel, table=True):
    """One entry of the bank. `key` is the stable name used in YAML files; `id` is internal."""

    __tablename__ = "bank_question"

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(index=True, unique=True, max_length=64)
    text: str
    kind: str = Field(default=Kind.QUESTION.value, max_length=16)
    triggers: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    layers: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # Scope: None / [] mean "any". Archs are prefixes of the compile target ("sm_90" covers sm_90a).
    problem: str | None = Field(default=None, max_length=64)
    archs: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    hypothesis: str = ""   # for curators: what the question makes the agent consider
    check: str = ""        # for curators: the measurement that answers it
    provenance: str = ""
    status: str = Field(default=Status.ACTIVE.value, max_length=16, index=True)
    merged_into_id: int | None = Field(default=None, foreign_key="bank_question.id")
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def is_active(self) -> bool:
        return self.status == Status.ACTIVE.value

    def suits(self, trigger: str) -> bool:
        return trigger in self.triggers

    def in_scope(self, problem: str | None, arch: str | None) -> bool:
        if problem and self.problem and self.problem != problem:
            return False
        return not (arch and self.archs and not any(arch.startswith(a) for a in self.archs))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "key": self.key,
            "text": self.text,
            "kind": self.kind,
            "triggers": list(self.triggers),
            "layers": list(self.layers),
            "problem": self.problem,
            "archs": list(self.archs),
            "hypothesis": self.hypothesis,
            "check": self.check,
            "provenance": self.provenance,
            "status": self.status,
            "merged_into_id": self.merged_into_id,
        }


class BankUse(SQLModel, table=True):
    """One message sent to an agent (from the bank or typed by a person), and the leader gain
    that followed it: credited over the next `window` evaluations of its session.

    `eval_index` is how many evaluations the session had finished when the message was sent;
    evaluation number n (1-based) credits this use while eval_index < n <= eval_index + window."""

    __tablename__ = "bank_use"

    id: int | None = Field(default=None, primary_key=True)
    question_id: int | None = Field(default=None, foreign_key="bank_question.id", index=True)
    session_ref: str = Field(index=True, max_length=64)
    intervention_ref: str | None = Field(default=None, max_length=64, index=True)
    text: str
    kind: str = Field(default=Kind.QUESTION.value, max_length=16)
    author: str = Field(default=Author.PERSON.value, max_length=16)
    trigger: str | None = Field(default=None, max_length=32)
    layers: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    used_at: datetime = Field(default_factory=utcnow)
    eval_index: int = 0
    window: int = 5
    leader_before: float = 1.0
    evaluations_seen: int = 0
    leader_after: float | None = None

    @property
    def gain(self) -> float | None:
        """Leader after / leader before, over the evaluations seen so far (None: none yet)."""
        if self.evaluations_seen == 0 or self.leader_after is None or self.leader_before <= 0:
            return None
        return self.leader_after / self.leader_before

    @property
    def complete(self) -> bool:
        return self.evaluations_seen >= self.window


class BankAutoAsk(SQLModel, table=True):
    """A session's auto-ask policy: off, after `idle_seconds` without a person, or at once; the
    bank asks at most `max_in_a_row` times in a row without a person's message in between."""

    __tablename__ = "bank_auto_ask"

    session_ref: str = Field(primary_key=True, max_length=64)
    mode: str = Field(default="off", max_length=16)
    idle_seconds: float = 120.0
    max_in_a_row: int = 3
    updated_at: datetime = Field(default_factory=utcnow)


class BankMeta(SQLModel, table=True):
    """Small facts about the bank itself, e.g. that the starter bank was loaded once."""

    __tablename__ = "bank_meta"

    key: str = Field(primary_key=True, max_length=64)
    value: str = ""
