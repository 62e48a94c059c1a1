"""Lessons as the pages draw them (templates/lessons.html, lesson.html and their fragments): a
view of each lesson whose every field is a plain text, a finite number or None, whatever the
stored JSON holds (an imported file holds anything), and the check an import passes before it
is kept: every lesson it touched drawn by the same fragments the pages use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.domain.lesson_actions import lesson_ratio, number, words_of
from app.faces.web import render
from lessons.models import Lesson
from lessons.search import LessonHit

TEXT_MAX = 300  # characters of a name or a label taken from a lesson's JSON


def _text(value: Any, limit: int = TEXT_MAX) -> str:
    return "" if value is None else str(value)[:limit]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _names(value: Any) -> list[str]:
    return [_text(v, 64) for v in value][:64] if isinstance(value, list) else []


@dataclass(frozen=True)
class Effect:
    name: str
    ratio: float | None
    n: int | None


@dataclass(frozen=True)
class EvidenceView:
    """One time the action was seen: where (a session of this server, or a trace file), which
    candidate against which parent, and what it measured."""

    key: str
    session_id: int | None
    trace: str
    candidate: int | None
    parent: int | None
    evaluation: int | None
    verdict: str
    ratio: float | None
    categories: list[Effect]
    broke: int

    @property
    def audit_url(self) -> str | None:
        return f"/sessions/{self.session_id}/audit" if self.session_id is not None else None

    @property
    def candidate_url(self) -> str | None:
        if self.session_id is None or self.candidate is None:
            return None
        return f"/sessions/{self.session_id}/audit/candidates/{self.candidate}"


@dataclass(frozen=True)
class LessonView:
    id: int
    key: str
    arch: str
    problem: str
    action: str
    kind: str
    layers: list[str]
    ratio: float | None
    count: int
    helped: int
    confidence: float | None
    status: str
    status_by: str
    author: str
    text: str
    engine: str
    gpu: str
    diagnosis: str
    categories: list[Effect]
    head_dims: list[Effect]
    holds: list[str]
    fails: list[str]
    tags: list[str]
    evidence: list[EvidenceView] = field(default_factory=list)
    fit: float | None = None
    why: list[str] = field(default_factory=list)

    @property
    def paid_off(self) -> bool:
        return self.ratio is not None and self.ratio > 1.01


def _effects(table: Any) -> list[Effect]:
    if not isinstance(table, dict):
        return []
    out = []
    for name, stats in table.items():
        stats = stats if isinstance(stats, dict) else {}
        out.append(Effect(_text(name, 64), number(stats.get("ratio")), _int(stats.get("n"))))
    return out


def _evidence(entry: Any) -> EvidenceView:
    e = entry if isinstance(entry, dict) else {}
    cats = e.get("categories")
    return EvidenceView(
        key=_text(e.get("key")), session_id=_int(e.get("session_id")), trace=_text(e.get("trace")),
        candidate=_int(e.get("candidate")), parent=_int(e.get("parent")), evaluation=_int(e.get("evaluation")),
        verdict=_text(e.get("verdict"), 32), ratio=number(e.get("ratio")),
        categories=[Effect(_text(k, 64), number(v), None) for k, v in cats.items()] if isinstance(cats, dict) else [],
        broke=_int(e.get("broke")) or 0,
    )


def lesson_view(lesson: Lesson, hit: LessonHit | None = None, *, evidence: bool = False) -> LessonView:
    action = lesson.action if isinstance(lesson.action, dict) else {}
    situation = lesson.situation if isinstance(lesson.situation, dict) else {}
    effect = lesson.effect if isinstance(lesson.effect, dict) else {}
    scope = lesson.scope if isinstance(lesson.scope, dict) else {}
    holds = scope["holds"] if isinstance(scope.get("holds"), dict) else {}
    fails = scope["fails"] if isinstance(scope.get("fails"), dict) else {}
    return LessonView(
        id=lesson.id or 0, key=_text(lesson.key, 255), arch=_text(lesson.arch, 32), problem=_text(lesson.problem, 64),
        action=_text(words_of(lesson), 1000), kind=_text(action.get("kind"), 16), layers=_names(action.get("layers")),
        ratio=lesson_ratio(lesson), count=lesson.count or 0, helped=lesson.helped or 0,
        confidence=number(lesson.confidence), status=lesson.status, status_by=lesson.status_by, author=lesson.author,
        text=_text(lesson.text, 4000), engine=_text(situation.get("engine"), 64), gpu=_text(situation.get("gpu"), 64),
        diagnosis=_text(situation.get("diagnosis"), 2000), categories=_effects(effect.get("category")),
        head_dims=_effects(effect.get("head_dim")), holds=_names(holds.get("category")),
        fails=_names(fails.get("category")), tags=_names(lesson.tags),
        evidence=[_evidence(e) for e in lesson.evidence or []] if evidence else [],
        fit=round(hit.fit, 3) if hit is not None else None, why=list(hit.why) if hit is not None else [],
    )


def check_drawable(lessons: list[Lesson]) -> None:
    """Draw every lesson as its table row and its evidence table (an exception means a page
    would fail on it: the import that wrote it is not kept)."""
    views = [lesson_view(x, evidence=True) for x in lessons]
    render.render("fragments/lessons_results.html", views=views, filters={}, count=len(views))
    for v in views:
        render.render("fragments/lesson_evidence.html", v=v)
