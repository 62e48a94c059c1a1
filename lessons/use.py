"""Where lessons are used, in the forms each reader takes: a short section of a model's prompt
(only active lessons whose scope covers the task, under a fixed token budget), the offline
agent's priors (knob changes with their effect and the parents they were measured from), and
the tool's answer.

Nothing here searches more than once per use: the store is reorganised in the background
(the distiller), never by a multi-hop search before a step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernels.attention.family import KNOB_LAYER
from lessons.distill import NOISE, action_words
from lessons.models import Lesson, Status
from lessons.search import LessonHit, Situation, fit

PROMPT_TOKENS = 600  # the prompt's lesson section never exceeds this (about 4 characters a token)
PROMPT_MAX_LESSONS = 6
PROMPT_MIN_CONFIDENCE = 0.7
PRIOR_MIN_CONFIDENCE = 0.5  # the offline agent tries an action first from here (seen helping at least once)


def tokens(text: str) -> int:
    """The estimate every knowledge-cost figure uses: a token is about four characters."""
    return (len(text) + 3) // 4


def _line(lesson: Lesson) -> str:
    eff = (lesson.effect or {}).get("overall", {})
    holds = ", ".join((lesson.scope or {}).get("holds", {}).get("category", [])) or "no category yet"
    fails = ", ".join((lesson.scope or {}).get("fails", {}).get("category", []))
    return (f"- [lesson {lesson.id}] {action_words(lesson.action or {})} (from a leader on "
            f"{(lesson.situation or {}).get('engine') or 'any engine'}): {lesson.ratio:.3f}x over its parent, "
            f"seen {lesson.count}x ({eff.get('min', lesson.ratio):.2f}-{eff.get('max', lesson.ratio):.2f}); held on "
            f"{holds}" + (f"; hurt on {fails}" if fails else "") + ".")


def speaks_the_family(lesson: Lesson) -> bool:
    """A knob lesson whose knobs are the family's and whose values are short plain values: only
    such words reach a model's prompt (an imported file is a person's text, not the family's)."""
    changes = (lesson.action or {}).get("changes")
    if (lesson.action or {}).get("kind") != "knobs" or not isinstance(changes, dict):
        return False
    return all(k in KNOB_LAYER and isinstance(v, list) and all(
        isinstance(x, bool | int | str) and len(str(x)) <= 24 for x in v) for k, v in changes.items())


@dataclass(frozen=True)
class PromptSection:
    text: str
    lessons: list[int]
    tokens: int


def prompt_section(lessons: Sequence[Lesson], situation: Situation, budget: int = PROMPT_TOKENS) -> PromptSection:
    """The few lessons a model's prompt carries: active, confident, paid off, knob changes of the
    family (`speaks_the_family`), and covering the task (architecture and problem match, held on a
    category the task measures); best first, whole lines only, under `budget` tokens."""
    chosen = []
    for lesson in lessons:
        if lesson.status != Status.ACTIVE.value or lesson.confidence < PROMPT_MIN_CONFIDENCE:
            continue
        if lesson.ratio <= 1 + NOISE or not speaks_the_family(lesson):
            continue
        score, _ = fit(lesson, situation)
        if score <= 0.5 if situation.categories else score <= 0:
            continue
        chosen.append((score * lesson.confidence * lesson.ratio, lesson))
    chosen.sort(key=lambda t: (-t[0], t[1].id or 0))
    head = "Lessons distilled from earlier sessions (measured; check them, they are not guarantees):"
    lines: list[str] = []
    ids: list[int] = []
    for _, lesson in chosen[:PROMPT_MAX_LESSONS]:
        line = _line(lesson)
        if tokens("\n".join([head, *lines, line])) > budget:
            break
        lines.append(line)
        ids.append(lesson.id or 0)
    text = "\n".join([head, *lines]) if lines else ""
    return PromptSection(text, ids, tokens(text))


def priors(lessons: Sequence[Lesson], situation: Situation) -> list[dict[str, Any]]:
    """Knob lessons for the offline agent (app/engine/agents/offline.py): each change with its
    values before and after, the engine it was seen on, its effect and confidence, and where it
    was measured from (the parents' setting hashes with their ratios)."""
    out = []
    for lesson in lessons:
        action = lesson.action or {}
        if action.get("kind") != "knobs" or lesson.status == Status.RETIRED.value:
            continue
        score, _ = fit(lesson, situation)
        if score <= 0:
            continue
        out.append({
            "id": lesson.id, "changes": action["changes"], "layers": action.get("layers", []),
            "engine": (lesson.situation or {}).get("engine", ""), "arch": lesson.arch,
            "ratio": lesson.ratio, "confidence": lesson.confidence, "count": lesson.count, "fit": round(score, 3),
            "measured": [{"parent": e["parent_setting"], "ratio": e.get("ratio"), "broke": e.get("broke", 0)}
                         for e in lesson.evidence if e.get("parent_setting")],
        })
    out.sort(key=lambda p: (-(p["ratio"] * p["confidence"] * p["fit"]), p["id"] or 0))
    return out


def hit_lines(hits: Sequence[LessonHit]) -> str:
    """The tool's text: one line per lesson, its evidence in brief."""
    if not hits:
        return "No lesson fits: nothing distilled yet for this situation."
    return "\n".join(_line(h.lesson) + (f" ({'; '.join(h.why)})" if h.why else "") for h in hits)
