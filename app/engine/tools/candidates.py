"""The candidate tools: submit a whole kernel, read or list earlier candidates, declare done."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.domain.sessions import candidate_by_number, candidates_of, fire_trigger, get_session, latest_evaluation
from app.domain.steering import goal as goals
from app.domain.steering import triggers
from app.engine.agents.base import (
    DECLARE_DONE,
    LIST_CANDIDATES,
    READ_CANDIDATE,
    SUBMIT_CANDIDATE,
    ToolCall,
    ToolError,
    ToolResult,
)
from app.engine.tools.base import Tool, ToolContext, ok
from app.engine.tools.readouts import describe_candidates, describe_evaluation, visible_results
from harness.report import EvaluationReport

if TYPE_CHECKING:
    from app.engine.pipeline import Verdicted


def verdict_data(verdicted: Verdicted) -> dict[str, Any]:
    """The structured result of a candidate through the pipeline: verdict and visible results."""
    c = verdicted.candidate
    view = visible_results(verdicted.report) if verdicted.report is not None else {}
    return {"number": c.number, "verdict": c.verdict, "reason": c.verdict_reason, **view}


async def submit_candidate(call: ToolCall, ctx: ToolContext) -> ToolResult:
    verdicted = await ctx.pipeline.submit(call.call_id, call.args)
    c = verdicted.candidate
    data = verdict_data(verdicted)
    if verdicted.report is None:
        return ok(call, f"Candidate #{c.number}: {c.verdict} - {c.verdict_reason}", data)
    return ok(call, describe_evaluation(c, visible_results(verdicted.report)), data)


async def read_candidate(call: ToolCall, ctx: ToolContext) -> ToolResult:
    with ctx.services.unit() as u:
        try:
            c = candidate_by_number(u.db, ctx.session_id, int(call.args.get("number", 0)))
        except (LookupError, ValueError) as exc:
            raise ToolError(str(exc)) from exc
        stored = latest_evaluation(u.db, c.id or 0, "suite")
    text = f"Candidate #{c.number} source:\n{c.source}"
    data: dict[str, Any] = {"number": c.number, "source": c.source}
    if stored is not None:
        view = visible_results(EvaluationReport.from_dict(stored.report))
        text += "\n\n" + describe_evaluation(c, view)
        data["results"] = view
    return ok(call, text, data)


async def list_candidates(call: ToolCall, ctx: ToolContext) -> ToolResult:
    with ctx.services.unit() as u:
        cands = list(candidates_of(u.db, ctx.session_id))
    return ok(call, describe_candidates(cands),
              {"candidates": [{"number": c.number, "verdict": c.verdict, "title": c.title,
                               "visible_speedup": c.visible_speedup} for c in cands]})


async def declare_done(call: ToolCall, ctx: ToolContext) -> ToolResult:
    reason = str(call.args.get("reason", ""))
    with ctx.services.unit() as u:
        session = get_session(u.db, ctx.session_id)
        fire_trigger(u, session, triggers.declared_done(reason))
        goal = goals.describe(session.goal_metric, session.goal_target)
        leader = session.leader_speedup
    return ok(call, "Noted. A person will review it. The session's goal is checked by the harness "
                    f"({goal}); the leader is at {leader or 1.0:.3f}x.")


TOOLS = [
    Tool(
        SUBMIT_CANDIDATE,
        "Submit a complete kernel. The harness compiles it, checks it statically, verifies it "
        "on fresh inputs and times it against the baseline; you get the results on the visible "
        "scenarios and the judge's verdict (leader, backup or rejected).",
        {
            "type": "object",
            "properties": {
                "source": {"type": "string", "description": "the whole kernel file"},
                "title": {"type": "string", "description": "a few words on what changed"},
                "notes": {"type": "string", "description": "why this should be faster"},
                "parent": {"type": "integer", "description": "number of the candidate it edits"},
            },
            "required": ["source"],
        },
        submit_candidate, acting=True,
    ),
    Tool(
        READ_CANDIDATE, "Read an earlier candidate's source and its visible results.",
        {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
        read_candidate,
    ),
    Tool(
        LIST_CANDIDATES, "List the session's candidates with verdicts and visible speedups.",
        {"type": "object", "properties": {}}, list_candidates,
    ),
    Tool(
        DECLARE_DONE,
        "Say that you cannot improve the kernel further, and why. A person reviews it; the "
        "session's goal is checked by the harness, not by this call.",
        {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]},
        declare_done, acting=True,
    ),
]
