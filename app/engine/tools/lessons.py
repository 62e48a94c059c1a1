"""`read_lessons`: what earlier sessions learned (lessons/), found by words and meaning, filtered
by tags, ranked by fit to this session (its GPU's architecture, its problem and categories) and
by evidence. Reading measures nothing and changes nothing; what the reading cost (seconds, and
tokens of the answer) is recorded for the audit's cost section (the knowledge layer's share)."""

from __future__ import annotations

import time

from app.domain.lessons import session_situation
from app.domain.sessions import get_session
from app.engine.agents.base import READ_LESSONS, ToolCall, ToolError, ToolResult
from app.engine.tools.base import Tool, ToolContext, ok
from lessons.search import Filters, search_lessons
from lessons.store import list_lessons
from lessons.use import hit_lines, tokens
from question_bank.semantic import default_embedder

DESCRIPTION = (
    "Read lessons distilled from earlier sessions: a situation (architecture, problem, the parent's engine and "
    "setting), an action (a knob change or an edit), and its measured effect per category (ratio over the "
    "parent, times seen, spread), with evidence. Search by words or meaning; filter by category, layer or "
    "knob. Lessons are measurements from other runs: check them here before you trust them."
)
SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what you want to know, in words (optional)"},
        "category": {"type": "string", "description": "only lessons measured on this scenario category"},
        "layer": {"type": "string", "description": "only lessons whose action changes this layer"},
        "knob": {"type": "string", "description": "only lessons whose action changes this knob"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "at most this many (default 5)"},
    },
}


async def read_lessons(call: ToolCall, ctx: ToolContext) -> ToolResult:
    started = time.monotonic()
    args = call.args
    try:
        limit = int(args.get("limit", 5))
    except (TypeError, ValueError) as exc:
        raise ToolError("limit must be an integer") from exc
    if not 1 <= limit <= 20:
        raise ToolError("limit must be between 1 and 20")
    for name in ("query", "category", "layer", "knob"):
        if not isinstance(args.get(name, ""), str):
            raise ToolError(f"{name} must be a text")
    embedder = default_embedder(ctx.services.settings.bank_semantic_search)
    with ctx.services.unit() as u:
        situation = session_situation(u.db, ctx.session_id,
                                      [str(x.get("category", "")) for x in ctx.task.visible_scenarios])
        filters = Filters(category=args.get("category", ""), layer=args.get("layer", ""), knob=args.get("knob", ""))
        hits = search_lessons(list_lessons(u.db), args.get("query", ""), filters=filters, situation=situation,
                              embedder=embedder, limit=limit)
        text = hit_lines(hits)
        seconds = time.monotonic() - started
        u.record(get_session(u.db, ctx.session_id), "knowledge",
                 {"what": READ_LESSONS, "seconds": round(seconds, 4), "tokens": tokens(text),
                  "lessons": [h.lesson.id for h in hits]})
    return ok(call, text, {"lessons": [h.to_dict() for h in hits], "seconds": round(seconds, 4)})


TOOLS = [Tool(READ_LESSONS, DESCRIPTION, SCHEMA, read_lessons)]
