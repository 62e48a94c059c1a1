"""`profile`: what bounds a candidate, from its stored suite evaluation (app/domain/profiles.py,
harness/profile.py): per category the share of the measured roofline it reaches, compute- or
memory-bound, the SASS mix, registers and spills, a diagnosis in words and findings that name
the kernel family's layer and knob to move. The agent reads the visible profile: hidden
scenarios are counted in the categories, never named. Reading a profile measures nothing new
and never changes a verdict."""

from __future__ import annotations

from app.domain import profiles
from app.domain.sessions import candidate_by_number, get_session
from app.engine.agents.base import PROFILE, ToolCall, ToolError, ToolResult
from app.engine.tools.base import Tool, ToolContext, ok
from app.store.models import Candidate
from harness.profile import render_profile

DESCRIPTION = (
    "Profile a candidate (default: the leader) from its suite evaluation: per scenario category the "
    "achieved TFLOP/s and GB/s as a share of the roofline measured on this GPU, compute- or memory-bound, "
    "the SASS instruction mix (HGMMA vs HMMA, TMA loads, local memory), registers and spills, a short "
    "diagnosis, and findings, each naming the layer and knob it points at and the expected direction. "
    "It runs nothing: it reads the evaluation already made."
)
SCHEMA = {
    "type": "object",
    "properties": {
        "number": {"type": "integer", "description": "the candidate's number (default: the session's leader)"},
    },
}


async def profile(call: ToolCall, ctx: ToolContext) -> ToolResult:
    number = call.args.get("number")
    with ctx.services.unit() as u:
        if number in (None, "", "leader"):
            session = get_session(u.db, ctx.session_id)
            if session.leader_id is None:
                raise ToolError("the session has no leader yet: give a candidate's number")
            c = u.db.get(Candidate, session.leader_id)
            assert c is not None
        else:
            try:
                c = candidate_by_number(u.db, ctx.session_id, int(number))
            except (LookupError, ValueError, TypeError) as exc:
                raise ToolError(str(exc)) from exc
        found = profiles.candidate_profile(u.db, c)
        shown_number = c.number
    if found is None:
        raise ToolError(f"candidate #{shown_number} has no suite evaluation to profile yet")
    visible = found.visible()
    return ok(call, f"Candidate #{shown_number}:\n" + render_profile(visible),
              {"number": shown_number, "profile": visible.to_dict()})


TOOLS = [Tool(PROFILE, DESCRIPTION, SCHEMA, profile)]
