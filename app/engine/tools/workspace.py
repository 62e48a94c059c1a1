"""The workspace tools of model-driven agents (Claude, MCP clients): one working copy of the
kernel (the draft, kept in the runner state so a restart keeps it), `evaluate`, which sends
the draft through the same candidate pipeline as submit_candidate, what the session has
learnt, and the question bank's tool."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from app.domain.sessions import candidates_of, get_session, interventions_of
from app.engine.agents.base import EDIT_KERNEL, EVALUATE, READ_FINDINGS, READ_KERNEL, WRITE_KERNEL, ToolCall, ToolResult
from app.engine.tools.base import Tool, ToolContext, ok, refused
from app.engine.tools.candidates import verdict_data
from app.engine.tools.readouts import compact_evaluation, fmt
from app.store.models import DELIVERED, Candidate, SteeringSession
from question_bank.agent_tool import TOOL_DESCRIPTION as BANK_TOOL_DESCRIPTION
from question_bank.agent_tool import TOOL_INPUT_SCHEMA as BANK_TOOL_SCHEMA
from question_bank.agent_tool import TOOL_NAME as CONSULT_BANK

KERNEL_VIEWS = ("current", "baseline", "leader", "contract")


@dataclass
class Draft:
    """The agent's working copy. `origin` is the candidate it was last evaluated as (or
    started from); `dirty` says whether it changed since."""

    source: str
    origin: int | None = None
    dirty: bool = False


def load_draft(ctx: ToolContext, leader: Candidate | None) -> Draft:
    stored = ctx.state.get("workspace")
    if stored:
        return Draft(**stored)
    if leader is not None:
        return Draft(leader.source, leader.number)
    return Draft(ctx.task.baseline_source)


def _session_and_leader(ctx: ToolContext, db: Session) -> tuple[SteeringSession, Candidate | None]:
    session = get_session(db, ctx.session_id)
    leader = db.get(Candidate, session.leader_id) if session.leader_id else None
    return session, leader


class EditError(ValueError):
    """An edit that cannot be applied; the message tells the agent why."""


def apply_edit(text: str, old: str, new: str, replace_all: bool = False) -> tuple[str, int]:
    """`text` with `old` replaced by `new`; returns the new text and how many places changed."""
    if not old:
        raise EditError("'old' is empty: give the exact text to replace")
    count = text.count(old)
    if count == 0:
        raise EditError("'old' does not occur in the working copy (read_kernel shows it; copy the text exactly, "
                        "whitespace included)")
    if count > 1 and not replace_all:
        raise EditError(f"'old' occurs {count} times; add surrounding lines to make it unique, or set replace_all")
    return text.replace(old, new), count


async def read_kernel(call: ToolCall, ctx: ToolContext) -> ToolResult:
    which = str(call.args.get("which") or "current")
    if which not in KERNEL_VIEWS:
        return refused(call, f"which must be one of {', '.join(KERNEL_VIEWS)}")
    with ctx.services.database.session() as db:
        _, leader = _session_and_leader(ctx, db)
        draft = load_draft(ctx, leader)
    if which == "current":
        where = f"candidate #{draft.origin}" if draft.origin else "the baseline"
        note = f"(your working copy; from {where}{', edited since' if draft.dirty else ''})"
        return ok(call, f"{note}\n{draft.source}", {"which": which, "source": draft.source, "origin": draft.origin})
    if which == "baseline":
        text = ctx.task.baseline_source
    elif which == "leader":
        if leader is None:
            return ok(call, "No leader yet: the baseline leads.", {"which": which, "source": None})
        text = f"(candidate #{leader.number}, {leader.speedup or 0:.3f}x)\n{leader.source}"
    else:
        text = ctx.task.contract
    return ok(call, text, {"which": which})


def _replace_draft(ctx: ToolContext, change: str | None, edit: tuple[str, str, bool] | None) -> tuple[Draft, int]:
    with ctx.services.unit() as u:
        session, leader = _session_and_leader(ctx, u.db)
        draft = load_draft(ctx, leader)
        count = 1
        if edit is not None:
            text, count = apply_edit(draft.source, *edit)
        else:
            assert change is not None
            text = change
        draft = Draft(text, draft.origin, dirty=True)
        ctx.state.save(u, session, workspace=asdict(draft))
    return draft, count


async def write_kernel(call: ToolCall, ctx: ToolContext) -> ToolResult:
    source = call.args.get("source")
    if not isinstance(source, str) or not source.strip():
        return refused(call, "write_kernel needs the whole kernel as 'source'")
    _replace_draft(ctx, source, None)
    lines = source.count("\n") + 1
    return ok(call, f"Working copy replaced ({lines} lines). Call evaluate to run it.", {"lines": lines})


async def edit_kernel(call: ToolCall, ctx: ToolContext) -> ToolResult:
    old, new = call.args.get("old"), call.args.get("new")
    if not isinstance(old, str) or not isinstance(new, str):
        return refused(call, "edit_kernel needs 'old' and 'new' as strings")
    try:
        _, count = _replace_draft(ctx, None, (old, new, bool(call.args.get("replace_all", False))))
    except EditError as exc:
        return refused(call, str(exc))
    return ok(call, f"Replaced {count} occurrence{'s' if count != 1 else ''}. Call evaluate to run it.",
              {"replaced": count})


async def evaluate(call: ToolCall, ctx: ToolContext) -> ToolResult:
    with ctx.services.database.session() as db:
        _, leader = _session_and_leader(ctx, db)
        draft = load_draft(ctx, leader)
    args: dict[str, object] = {"source": draft.source, "title": call.args.get("title", ""),
                               "notes": call.args.get("notes", "")}
    if draft.origin is not None:
        args["parent"] = draft.origin
    # The call's own id: after a restart the pipeline finds the candidate this call already created.
    verdicted = await ctx.pipeline.submit(call.call_id, args)
    data = verdict_data(verdicted)
    with ctx.services.unit() as u:
        session = get_session(u.db, ctx.session_id)
        ctx.state.save(u, session, workspace=asdict(Draft(draft.source, verdicted.candidate.number, dirty=False)))
    return ok(call, compact_evaluation(data), data)


async def read_findings(call: ToolCall, ctx: ToolContext) -> ToolResult:
    with ctx.services.database.session() as db:
        session = get_session(db, ctx.session_id)
        cands = list(candidates_of(db, ctx.session_id))
        messages = [i for i in interventions_of(db, ctx.session_id) if i.status == DELIVERED]
    leader = next((c for c in cands if c.id == session.leader_id), None)
    if leader is not None:
        lines = [f"Leader: candidate #{leader.number} ({leader.title or 'untitled'}), visible "
                 f"{fmt(leader.visible_speedup)} vs baseline."]
    else:
        lines = ["Leader: the baseline (no candidate won yet)."]
    lines.append(f"Evaluations so far: {session.evaluations}.")
    if cands:
        lines.append("Candidates (what worked and what did not):")
    for c in cands:
        why = c.verdict_reason[:200] if c.verdict_reason else c.status
        note = f" - notes: {c.notes[:160]}" if c.notes else ""
        lines.append(f"  #{c.number} {c.verdict or c.status} {fmt(c.visible_speedup)} "
                     f"{c.title or 'untitled'}: {why}{note}")
    if messages:
        lines.append("Messages you received:")
        lines.extend(f"  ({m.kind} from {m.author}) {m.text}" for m in messages)
    data = {"leader": leader.number if leader else None, "evaluations": session.evaluations,
            "candidates": [{"number": c.number, "verdict": c.verdict, "title": c.title,
                            "visible_speedup": c.visible_speedup, "reason": c.verdict_reason} for c in cands],
            "messages": [m.text for m in messages]}
    return ok(call, "\n".join(lines), data)


async def consult_bank(call: ToolCall, ctx: ToolContext) -> ToolResult:
    from question_bank.agent_tool import ToolInputError
    from question_bank.agent_tool import consult_bank as ask_bank
    from question_bank.store import ensure_starter_bank

    with ctx.services.database.session() as db:
        session = get_session(db, ctx.session_id)
        try:
            ensure_starter_bank(db)
            answer = ask_bank(db, call.args, session_ref=str(ctx.session_id), problem=session.problem,
                              eval_index=session.evaluations, leader=session.leader_speedup)
        except ToolInputError as exc:
            return refused(call, str(exc))
        except OperationalError:
            db.rollback()
            return refused(call, "the question bank is not installed in this server's database")
    lines = [f"- {q['text']}" for q in answer["questions"]] or ["The bank has no question for this situation."]
    return ok(call, "\n".join([*lines, answer["note"]]), answer)


TOOLS = [
    Tool(
        READ_KERNEL,
        "Read a kernel: 'current' is your working copy (what evaluate runs), 'baseline' the kernel "
        "the session started from, 'leader' the best kernel the judge has accepted so far, and "
        "'contract' the ABI header every kernel implements.",
        {"type": "object",
         "properties": {"which": {"type": "string", "enum": list(KERNEL_VIEWS),
                                  "description": "which text to read (default: current)"}}},
        read_kernel,
    ),
    Tool(
        WRITE_KERNEL,
        "Replace your working copy with a complete kernel file. Nothing runs until you call evaluate.",
        {"type": "object", "properties": {"source": {"type": "string", "description": "the whole kernel file"}},
         "required": ["source"]},
        write_kernel, acting=True,
    ),
    Tool(
        EDIT_KERNEL,
        "Edit your working copy: replace the exact text `old` with `new`. `old` must occur exactly once "
        "unless replace_all is true. Prefer this to rewriting a long file.",
        {"type": "object",
         "properties": {
             "old": {"type": "string", "description": "text to find, copied exactly"},
             "new": {"type": "string", "description": "its replacement"},
             "replace_all": {"type": "boolean", "description": "replace every occurrence (default false)"},
         },
         "required": ["old", "new"]},
        edit_kernel, acting=True,
    ),
    Tool(
        EVALUATE,
        "Run the harness on your working copy: static checks, compile, correctness on fresh inputs, "
        "timing against the baseline on the visible scenarios. You get a compact result (geomean, "
        "failures with reasons, slowest scenarios) and the judge's verdict (leader, backup or rejected). "
        "Hidden scenarios are run too and only counted.",
        {"type": "object",
         "properties": {
             "title": {"type": "string", "description": "a few words on what changed"},
             "notes": {"type": "string", "description": "why this should be faster"},
         }},
        evaluate, acting=True,
    ),
    Tool(
        READ_FINDINGS,
        "Read what this session has learnt so far: the leader, every candidate with its verdict and "
        "notes (what worked, what failed and why), and the questions people asked you.",
        {"type": "object", "properties": {}},
        read_findings,
    ),
    Tool(CONSULT_BANK, BANK_TOOL_DESCRIPTION, BANK_TOOL_SCHEMA, consult_bank),
]
