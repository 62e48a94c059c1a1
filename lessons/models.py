"""A lesson's vocabulary (statuses, authors) and its table, `lesson`. The app's database imports
this module so that the table shares its metadata (app/store/database.py, MODEL_MODULES).

A lesson is one situation and one action with the effect measured every time the action was
taken in that situation: per scenario category and per head_dim a geometric mean of the
candidate-over-parent ratios, how many times, their spread. Its evidence names each time
(session, candidate and evaluation ids, or an imported trace's file name). A record that cannot
name both a situation and an action is not a lesson (`check_lesson`)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel


class Status(StrEnum):
    PROPOSED = "proposed"  # distilled, not yet confirmed often enough to be shown to a model
    ACTIVE = "active"  # confirmed (or a person said so): a model's prompt may carry it
    RETIRED = "retired"  # a person took it out: never shown, never revived by the distiller


class Author(StrEnum):
    DISTILLER = "distiller"  # the deterministic distiller (lessons/distill.py)
    MODEL = "model"  # a model wrote its words (lessons/words.py)
    PERSON = "person"  # a person wrote or edited it


def utcnow() -> datetime:
    return datetime.now(UTC)


class LessonError(ValueError):
    """A record that is not a lesson, or a change a lesson refuses; the message says which field."""


class Lesson(SQLModel, table=True):
    """One lesson. `key` names its situation and action (lessons/distill.py: lesson_key); evidence
    for the same key merges into the same row, never into a twin."""

    __tablename__ = "lesson"

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(index=True, unique=True, max_length=255)
    arch: str = Field(default="", max_length=32, index=True)  # the compile target's family: "sm_90"
    problem: str = Field(default="", max_length=64, index=True)
    # where: arch, problem, the parent's setting (knobs) or a summary of its code, the categories
    # it was measured on, the parent's profile diagnosis where there was one
    situation: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    # what: {"kind": "knobs", "changes": {knob: [from, to]}} or {"kind": "edit", "summary", "features"}
    action: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    # per category and head_dim, and overall: {"ratio", "n", "min", "max"} (candidate over parent)
    effect: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    ratio: float = 1.0  # overall geometric mean of the ratios seen (> 1: the action paid off)
    count: int = 0  # times seen
    helped: int = 0  # times it paid off (ratio above 1 + NOISE)
    confidence: float = 0.5  # (helped + 1) / (count + 2): a contradiction lowers it
    # {"holds": {"category": [...], "head_dim": [...]}, "fails": {...}, "arch": [...]}
    scope: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    evidence: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    text: str = ""  # the lesson in words (a template offline, a model's paragraph where one wrote it)
    status: str = Field(default=Status.PROPOSED.value, max_length=16, index=True)
    status_by: str = Field(default=Author.DISTILLER.value, max_length=16)  # a person's status sticks
    author: str = Field(default=Author.DISTILLER.value, max_length=16)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "key": self.key, "arch": self.arch, "problem": self.problem,
            "situation": self.situation, "action": self.action, "effect": self.effect,
            "ratio": self.ratio, "count": self.count, "helped": self.helped, "confidence": self.confidence,
            "scope": self.scope, "evidence": self.evidence, "tags": list(self.tags), "text": self.text,
            "status": self.status, "status_by": self.status_by, "author": self.author,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


def check_lesson(situation: dict[str, Any], action: dict[str, Any]) -> None:
    """Refuse a record without a situation or without an action: it is not a lesson."""
    if not isinstance(situation, dict) or not (situation.get("arch") and situation.get("problem")):
        raise LessonError("a lesson needs a situation: at least the architecture and the problem it was seen on")
    if not isinstance(action, dict) or action.get("kind") not in ("knobs", "edit"):
        raise LessonError("a lesson needs an action: a knob change or a summary of an edit")
    changes = action.get("changes")
    if action["kind"] == "knobs" and not changes:
        raise LessonError("a knob action names at least one knob and its values before and after")
    if action["kind"] == "knobs" and not (isinstance(changes, dict) and all(
            isinstance(k, str) and isinstance(v, list) and len(v) == 2 for k, v in changes.items())):
        raise LessonError("a knob action's changes map each knob's name to [before, after]")
    if not isinstance(action.get("layers", []), list):
        raise LessonError("an action's layers are a list")
    if action["kind"] == "edit" and not (isinstance(action.get("summary"), str) and action["summary"].strip()):
        raise LessonError("an edit action needs a summary of the diff")
