"""`read_board`: what the other agents of the campaign concluded (app/domain/campaigns/board.py), filtered
by layer, scenario category and outcome, within the campaign's memory bound."""

from __future__ import annotations

from app.domain.campaigns import board
from app.engine.agents.base import READ_BOARD, ToolCall, ToolError, ToolResult
from app.engine.tools.base import Tool, ToolContext, ok

DESCRIPTION = (
    "Read the campaign's board: one line per judged kernel of every agent in this campaign - what "
    "changed (the layer and knobs, or a summary of the diff), its effect per scenario category "
    "(x over its parent) and its verdict (leader, backup, discarded); in the data, each entry's "
    "whole knob setting (family kernels) and its speedup over the visible scenarios, and the "
    "kernels other agents submitted that are not judged yet (`in_flight`). Filter by "
    "layer, category or outcome (leader, backup, discarded, improved, worse). Outside a campaign "
    "the board is empty."
)
# What an entry's "category xN" compares (app/domain/campaigns/board.py: post), said with every read.
EFFECTS = ("Each effect is a category's geomean speedup on the visible scenarios over the kernel the change "
           "was built on (its parent; for a kernel built on another agent's, the nearest kernel measured with "
           "the same setting); a first kernel's is over the naive baseline. x1.00 is no change.")
SCHEMA = {
    "type": "object",
    "properties": {
        "layer": {"type": "string", "description": "tiling, memory, math, scheduling or masking"},
        "category": {"type": "string", "description": "a scenario category, e.g. decode"},
        "outcome": {"type": "string", "enum": list(board.OUTCOMES)},
        "others_only": {"type": "boolean", "description": "leave out this agent's own entries"},
    },
}


def _text(value: object, name: str) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string")
    return value


async def read_board(call: ToolCall, ctx: ToolContext) -> ToolResult:
    layer, category = _text(call.args.get("layer"), "layer"), _text(call.args.get("category"), "category")
    outcome = _text(call.args.get("outcome"), "outcome")
    if outcome is not None and outcome not in board.OUTCOMES:
        raise ToolError(f"outcome must be one of {', '.join(board.OUTCOMES)}")
    with ctx.services.database.session() as db:
        found = board.member_of(db, ctx.session_id)
        if found is None:
            return ok(call, "This session is not part of a campaign: the board is empty.", {"entries": []})
        campaign = found[0]
        # In flight first: a kernel judged between the two reads is then in both, never in neither.
        waiting = board.in_flight(db, campaign, ctx.session_id if call.args.get("others_only") else None)
        entries = board.read(db, campaign, layer=layer, category=category, outcome=outcome)
        if call.args.get("others_only"):
            entries = [e for e in entries if e.session_id != ctx.session_id]
        data = board.for_agents(db, entries)
    bound = f"the last {campaign.memory_k} entries" if campaign.memory_k is not None else "every entry"
    lines = [board.entry_line(e) for e in entries]
    text = (f"The board ({bound}; {len(lines)} match). {EFFECTS}\n"
            + ("\n".join(lines) if lines else "(nothing yet)"))
    if waiting:
        text += "\nSubmitted, not judged yet: " + "; ".join(f"{w['author']} #{w['candidate']}" for w in waiting)
    return ok(call, text, {"entries": data, "in_flight": waiting, "memory_k": campaign.memory_k,
                           "session_id": ctx.session_id})


TOOLS = [Tool(READ_BOARD, DESCRIPTION, SCHEMA, read_board)]
