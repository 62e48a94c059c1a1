"""Finding lessons again: hybrid ranking (the bank's keyword scoring, plus the `semantic` extra's
embeddings where installed; keywords alone without them), tag filters (architecture, problem,
category, layer, knob, status), and an order by fit and evidence.

Fit: how well the lesson's scope covers the situation asked about (its architecture, the
categories it held on). Evidence: confidence, how often it was seen, and how large the effect
was. With a query, relevance to the words comes first and fit and evidence weigh it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lessons.distill import NOISE, action_words
from lessons.models import Lesson, Status
from question_bank.search import document_scores, relevance, words
from question_bank.semantic import Embedder


@dataclass(frozen=True)
class Filters:
    """Tag filters; an empty field matches every lesson."""

    arch: str = ""  # a prefix: "sm_90" matches "sm_90"
    problem: str = ""
    category: str = ""  # measured on this category (held or not)
    layer: str = ""  # the kernel family's layer its action changes
    knob: str = ""  # a knob its action changes
    statuses: tuple[str, ...] = (Status.PROPOSED.value, Status.ACTIVE.value)
    min_confidence: float = 0.0

    def matches(self, lesson: Lesson) -> bool:
        action = lesson.action or {}
        if lesson.status not in self.statuses or lesson.confidence < self.min_confidence:
            return False
        if self.arch and not (lesson.arch or "").startswith(self.arch):
            return False
        if self.problem and lesson.problem != self.problem:
            return False
        if self.category and self.category not in (lesson.effect or {}).get("category", {}):
            return False
        if self.layer and self.layer not in action.get("layers", []):
            return False
        return not (self.knob and self.knob not in (action.get("changes") or {}))


@dataclass(frozen=True)
class Situation:
    """Where a reader stands: its architecture (may be unknown) and the categories it measures."""

    arch: str = ""
    problem: str = ""
    categories: tuple[str, ...] = ()


@dataclass(frozen=True)
class LessonHit:
    lesson: Lesson
    score: float
    keyword: float
    semantic: float | None
    fit: float
    evidence: float
    why: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**self.lesson.to_dict(), "score": round(self.score, 4), "keyword": round(self.keyword, 4),
                "semantic": None if self.semantic is None else round(self.semantic, 4),
                "fit": round(self.fit, 4), "evidence_weight": round(self.evidence, 4), "why": self.why}


# What the family's knobs mean, in the words a person searches with (kernels/attention/family/space.py).
KNOB_WORDS: dict[str, str] = {
    "mma": "tensor-core instruction: warp-level mma.sync or Hopper's warpgroup wgmma",
    "softmax_exp": "the softmax exponential: expf, exp2, the scale folded into exp2",
    "rescale": "online softmax rescaling of the output accumulator",
    "loader": "how K/V tiles are loaded: cp.async, bulk copy, TMA",
    "stages": "pipeline stages: multi-buffered K/V loads",
    "smem_layout": "shared-memory layout: padding or swizzle against bank conflicts",
    "q_fragments": "query fragments kept in shared memory or in registers",
    "grid_order": "the order of thread blocks on the grid: m fastest, head fastest, heavy first",
    "persistent": "a persistent kernel: one wave of CTAs striding over the tiles",
    "split_kv": "split the keys across CTAs (split-KV, flash-decoding) to fill the GPU",
    "split_combine": "how the split-KV partial results are combined",
    "pack_gqa": "pack a GQA group's query heads into one tile (grouped-query attention)",
    "causal_skip": "skip key blocks past the causal diagonal",
    "mask_split": "mask only the boundary blocks",
    "decode_tile": "tile shape for decode calls",
    "decode_kv_warps": "warps reading keys and values in decode",
}


def knob_words(knob: str) -> str:
    if knob in KNOB_WORDS:
        return KNOB_WORDS[knob]
    if knob.startswith("tile_d"):
        return f"tile shape (block sizes) for head_dim {knob[6:]}"
    if knob.startswith("wg_"):
        return "Hopper warpgroup (wgmma) kernel: " + knob[3:].replace("_", " ")
    return knob.replace("_", " ")


def short_text(lesson: Lesson) -> str:
    """What a lesson is about in a line: the text embedded for search by meaning."""
    action = lesson.action or {}
    layers = ", ".join(action.get("layers", []))
    glosses = "; ".join(knob_words(k) for k in (action.get("changes") or {}))
    return f"{layers + ' layer: ' if layers else ''}{action_words(action)} ({glosses or 'an edit'})"


def lesson_text(lesson: Lesson) -> str:
    return f"{short_text(lesson)}. {lesson.text}"


def _document(lesson: Lesson) -> tuple[set[str], set[str]]:
    primary = set(words(" ".join([short_text(lesson), *lesson.tags, lesson.arch, lesson.problem])))
    secondary = set(words(lesson.text)) - primary
    return primary, secondary


def evidence_weight(lesson: Lesson) -> float:
    """In [0, 1]: confidence, times seen (saturating near 6), and the size of the effect."""
    seen = min(1.0, math.log1p(lesson.count) / math.log1p(6))
    size = min(1.0, abs(math.log(lesson.ratio)) / math.log(1.5)) if lesson.ratio and lesson.ratio > 0 else 0.0
    return lesson.confidence * (0.6 * seen + 0.4 * size)


def fit(lesson: Lesson, situation: Situation | None) -> tuple[float, list[str]]:
    """In [0, 1]: 1 when the architecture and problem match and the lesson held on the categories
    asked about; lower where it is unknown there; 0 where its scope says it does not hold."""
    if situation is None:
        return 1.0, []
    why = []
    score = 1.0
    if situation.arch and lesson.arch and not situation.arch.startswith(lesson.arch):
        return 0.0, [f"seen on {lesson.arch}, not {situation.arch}"]
    if situation.problem and lesson.problem and lesson.problem != situation.problem:
        return 0.0, [f"seen on {lesson.problem}"]
    holds = set((lesson.scope or {}).get("holds", {}).get("category", []))
    fails = set((lesson.scope or {}).get("fails", {}).get("category", []))
    if situation.categories:
        asked = set(situation.categories)
        if asked & holds:
            why.append("held on " + ", ".join(sorted(asked & holds)))
        if asked & fails:
            why.append("hurt on " + ", ".join(sorted(asked & fails)))
        known = asked & (holds | fails)
        score = (len(asked & holds) + 0.5 * len(asked - holds - fails)) / len(asked)
        if not known:
            why.append("never measured on these categories")
    return score, why


def search_lessons(lessons: Sequence[Lesson], query: str = "", *, filters: Filters | None = None,
                   situation: Situation | None = None, embedder: Embedder | None = None,
                   limit: int | None = 20) -> list[LessonHit]:
    """Filter, then rank. Without a query: by fit x evidence. With one: words and meaning first."""
    filters = filters or Filters()
    pool = [lesson for lesson in lessons if filters.matches(lesson)]
    kw = [0.0] * len(pool)
    sem: list[float | None] = [None] * len(pool)
    if query.strip() and pool:
        kw = document_scores([_document(x) for x in pool], [lesson_text(x) for x in pool], query)
        if embedder is not None:
            vectors = embedder.embed([query, *(short_text(x) for x in pool)])
            sem = [sum(a * b for a, b in zip(vectors[0], v, strict=True)) for v in vectors[1:]]
    hits = []
    for lesson, k, s in zip(pool, kw, sem, strict=True):
        f, why = fit(lesson, situation)
        if situation is not None and f <= 0:
            continue
        e = evidence_weight(lesson)
        if query.strip():
            hit = relevance(k, s)
            if hit is None:
                continue
            score = hit * (0.6 + 0.2 * f + 0.2 * e)
        else:
            score = f * (0.3 + 0.7 * e) * (1.0 if lesson.ratio > 1 + NOISE else 0.5)
        hits.append(LessonHit(lesson, score, k, s, f, e, why))
    hits.sort(key=lambda h: (-h.score, -(h.lesson.count), h.lesson.id or 0))
    return hits[:limit] if limit is not None else hits
