"""The agent's tool for consulting the bank: a situation in, a few questions out.

The agent gets question texts only (never the curators' hypothesis or check notes, which would
hand over the answer). Ranking is the pause ranking (trigger, unexplored layers, evidence, no
repeats) plus how well each question matches the agent's own description of its situation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from sqlmodel import Session

from question_bank.evidence import question_evidence, record_use
from question_bank.models import PAUSE_TRIGGERS, Author, Kind, Layer, Status
from question_bank.ranking import PauseSituation, rank, situation_for_session
from question_bank.search import search_questions
from question_bank.semantic import Embedder
from question_bank.store import list_questions

TOOL_NAME = "consult_question_bank"
MAX_SITUATION = 2000
RELEVANCE_WEIGHT = 1.5   # match with the agent's words; below novelty so that the agent is moved
TRIED_WEIGHT = 2         # a layer the agent says it worked on counts as explored this many times
LAYER_NAMES = tuple(layer.value for layer in Layer)

TOOL_DESCRIPTION = (
    "Ask the question bank for questions that people found useful when an attention kernel stopped "
    "improving, was declared done, won suspiciously, or ran low on budget. Describe your situation; "
    "you get a few questions back. They are not answers: each names a hypothesis you may not have "
    "considered and can be checked with a measurement. Use it when progress stalls or before you "
    "declare a limit."
)

TOOL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "situation": {
            "type": "string",
            "description": "What you are doing and where you are stuck, in a sentence or two, e.g. "
                           "'causal head_dim 128 stuck at 0.9x cuDNN after tuning tile sizes'.",
            "maxLength": MAX_SITUATION,
        },
        "trigger": {
            "type": "string",
            "enum": list(PAUSE_TRIGGERS),
            "description": "Why you are asking: plateau (no progress), declared_limit (you think you "
                           "are done), suspicious_win (a gain that looks too good), budget, or manual.",
        },
        "layers_tried": {
            "type": "array",
            "items": {"type": "string", "enum": list(LAYER_NAMES)},
            "description": "Layers of the kernel you have already worked on.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 5, "description": "How many questions (default 3)."},
    },
    "required": ["situation"],
    "additionalProperties": False,
}

TOOL_SPEC: dict[str, Any] = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_INPUT_SCHEMA}


class ToolInputError(ValueError):
    """The agent's arguments do not fit the schema; the message is meant for the agent."""


def _parse(arguments: Mapping[str, Any]) -> tuple[str, str, list[str], int]:
    unknown = set(arguments) - set(TOOL_INPUT_SCHEMA["properties"])
    if unknown:
        raise ToolInputError(f"unknown argument(s): {', '.join(sorted(unknown))}")
    situation = arguments.get("situation")
    if not isinstance(situation, str) or not situation.strip():
        raise ToolInputError("'situation' must be a non-empty string describing where you are stuck")
    if len(situation) > MAX_SITUATION:
        raise ToolInputError(f"'situation' is longer than {MAX_SITUATION} characters")
    trigger = arguments.get("trigger", "manual")
    if trigger not in PAUSE_TRIGGERS:
        raise ToolInputError(f"'trigger' must be one of {', '.join(PAUSE_TRIGGERS)}")
    layers = arguments.get("layers_tried", [])
    if not isinstance(layers, list) or any(x not in LAYER_NAMES for x in layers):
        raise ToolInputError(f"'layers_tried' must be a list drawn from {', '.join(LAYER_NAMES)}")
    limit = arguments.get("limit", 3)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 5:
        raise ToolInputError("'limit' must be an integer from 1 to 5")
    return situation.strip(), trigger, list(layers), limit


def consult_bank(
    session: Session,
    arguments: Mapping[str, Any],
    *,
    session_ref: str | int | None = None,
    problem: str | None = None,
    arch: str | None = None,
    eval_index: int | None = None,
    leader: float | None = None,
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """Run the tool. With `session_ref` the session's history shapes the ranking (no repeats,
    unexplored layers first); with `eval_index` too, each returned question is recorded as a use
    by the agent, so the evidence shows whether consulting the bank helps."""
    text, trigger, layers_tried, limit = _parse(arguments)
    tried = Counter({layer: TRIED_WEIGHT for layer in layers_tried})
    if session_ref is not None:
        base = situation_for_session(session, session_ref, trigger, problem=problem, arch=arch,
                                     extra_layers=tried)
    else:
        base = PauseSituation(trigger=trigger, problem=problem, arch=arch, explored_layers=dict(tried))
    pool = list_questions(session, status=Status.ACTIVE.value, kind=Kind.QUESTION.value)
    ranked = rank(pool, base, question_evidence(session))
    relevance = {hit.question.id: hit.score for hit in search_questions(pool, text, embedder=embedder)}
    combined = sorted(ranked, key=lambda r: -(r.score + RELEVANCE_WEIGHT * relevance.get(r.question.id, 0.0)))
    chosen = combined[:limit]
    if session_ref is not None and eval_index is not None:
        for r in chosen:
            record_use(session, session_ref=session_ref, text=r.question.text, kind=r.question.kind,
                       author=Author.AGENT.value, eval_index=eval_index, leader=leader,
                       question_id=r.question.id, trigger=trigger)
    return {
        "questions": [{"text": r.question.text, "layers": list(r.question.layers)}
                      for r in chosen],
        "note": "Questions, not answers: each names a hypothesis. Check it with a measurement before "
                "you act on it.",
    }
