"""The runner's side of the workspace tools (app/agents/toolset.py): the agent's working copy
of the kernel (kept in the session's runner state, so a restart keeps it), evaluation of
that copy through the same path as submit_candidate, the session's findings, and the
question bank's agent tool."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import OperationalError

from app.agents.base import SUBMIT_CANDIDATE, ToolCall, ToolResult
from app.agents.toolset import (
    CONSULT_BANK,
    EDIT_KERNEL,
    EVALUATE,
    KERNEL_VIEWS,
    READ_FINDINGS,
    READ_KERNEL,
    WRITE_KERNEL,
    EditError,
    apply_edit,
)
from app.kernel_names import kernel_source
from app.models import DELIVERED, PYTHON_CPU, Candidate, SteeringSession
from app.runner import evaluation as ev
from app.sessions import candidates_of, get_session, interventions_of

if TYPE_CHECKING:
    from app.runner.session_runner import SessionRunner

STATE_KEY = "workspace"
CONTRACT = ev.PROJECT_ROOT / "kernels" / "attention" / "contract.h"
PYTHON_CONTRACT = (
    "python-cpu session: a kernel is a `module:function` target importable by the harness's worker "
    "(e.g. tests.cpu_kernels:correct). The function receives AttentionBuffers (q, k, v, o, causal, scale, "
    "workspace) and returns 0 on success or a CUDA-style error code."
)
SLOWEST_SHOWN = 3
FAILURES_SHOWN = 5


@dataclass
class Draft:
    """The agent's working copy. `origin` is the candidate it was last evaluated as (or
    started from); `dirty` says whether it changed since."""

    source: str
    origin: int | None = None
    dirty: bool = False


def _baseline_source(session: SteeringSession) -> str:
    if session.candidate_kind == PYTHON_CPU:
        return session.baseline
    return kernel_source(session.baseline) or ""


def load_draft(runner: SessionRunner, session: SteeringSession, leader: Candidate | None) -> Draft:
    stored = runner._state.get(STATE_KEY)
    if stored:
        return Draft(**stored)
    if leader is not None:
        return Draft(leader.source, leader.number)
    return Draft(_baseline_source(session))


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call.call_id, call.name, False, message)


async def run_workspace_tool(runner: SessionRunner, call: ToolCall) -> ToolResult:
    """Execute one workspace tool call for `runner`'s session."""
    if call.name == EVALUATE:
        return await _evaluate(runner, call)
    if call.name == CONSULT_BANK:
        return _consult_bank(runner, call)
    if call.name == READ_FINDINGS:
        return _read_findings(runner, call)
    with runner.ctx.unit() as u:
        session = get_session(u.db, runner.session_id)
        leader = u.db.get(Candidate, session.leader_id) if session.leader_id else None
        draft = load_draft(runner, session, leader)
        if call.name == READ_KERNEL:
            which = str(call.args.get("which") or "current")
            if which not in KERNEL_VIEWS:
                return _error(call, f"which must be one of {', '.join(KERNEL_VIEWS)}")
            if which == "current":
                where = f"candidate #{draft.origin}" if draft.origin else "the baseline"
                note = f"(your working copy; from {where}{', edited since' if draft.dirty else ''})"
                return ToolResult(call.call_id, call.name, True, f"{note}\n{draft.source}",
                                  {"which": which, "source": draft.source, "origin": draft.origin})
            if which == "baseline":
                text = _baseline_source(session)
            elif which == "leader":
                if leader is None:
                    return ToolResult(call.call_id, call.name, True, "No leader yet: the baseline leads.",
                                      {"which": which, "source": None})
                text = f"(candidate #{leader.number}, {leader.speedup or 0:.3f}x)\n{leader.source}"
            else:
                text = PYTHON_CONTRACT if session.candidate_kind == PYTHON_CPU else CONTRACT.read_text()
            return ToolResult(call.call_id, call.name, True, text, {"which": which})
        if call.name == WRITE_KERNEL:
            source = call.args.get("source")
            if not isinstance(source, str) or not source.strip():
                return _error(call, "write_kernel needs the whole kernel as 'source'")
            draft = Draft(source, draft.origin, dirty=True)
            runner._save(u, session, **{STATE_KEY: asdict(draft)})
            return ToolResult(call.call_id, call.name, True,
                              f"Working copy replaced ({source.count(chr(10)) + 1} lines). Call evaluate to run it.",
                              {"lines": source.count("\n") + 1})
        if call.name == EDIT_KERNEL:
            old, new = call.args.get("old"), call.args.get("new")
            if not isinstance(old, str) or not isinstance(new, str):
                return _error(call, "edit_kernel needs 'old' and 'new' as strings")
            try:
                text, count = apply_edit(draft.source, old, new, bool(call.args.get("replace_all", False)))
            except EditError as exc:
                return _error(call, str(exc))
            draft = Draft(text, draft.origin, dirty=True)
            runner._save(u, session, **{STATE_KEY: asdict(draft)})
            return ToolResult(call.call_id, call.name, True,
                              f"Replaced {count} occurrence{'s' if count != 1 else ''}. Call evaluate to run it.",
                              {"replaced": count})
    return _error(call, f"{call.name} is not a workspace tool")


async def _evaluate(runner: SessionRunner, call: ToolCall) -> ToolResult:
    with runner.ctx.unit() as u:
        session = get_session(u.db, runner.session_id)
        leader = u.db.get(Candidate, session.leader_id) if session.leader_id else None
        draft = load_draft(runner, session, leader)
    args: dict[str, Any] = {"source": draft.source, "title": call.args.get("title", ""),
                            "notes": call.args.get("notes", "")}
    if draft.origin is not None:
        args["parent"] = draft.origin
    # Same call id: after a restart the runner finds the candidate this call already created.
    result = await runner._submit(ToolCall(SUBMIT_CANDIDATE, args, call.call_id))
    number = result.data.get("number")
    with runner.ctx.unit() as u:
        session = get_session(u.db, runner.session_id)
        runner._save(u, session, **{STATE_KEY: asdict(Draft(draft.source, number, dirty=False))})
    return ToolResult(call.call_id, call.name, result.ok, compact_evaluation(result.data), result.data)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def compact_evaluation(data: dict[str, Any]) -> str:
    """A few lines an agent can act on: verdict, geomean, failures with reasons, slowest scenarios."""
    head = f"Candidate #{data.get('number')}: {data.get('verdict')} - {data.get('reason', '')}"
    if "visible" not in data:
        return head
    if not data.get("compiled", True):
        return f"{head}\nIt did not compile or failed the static checks:\n{data.get('compile_log', '')}"
    vis, hid = data["visible"], data["hidden"]
    peers = ", ".join(f"{_fmt(v)} {name}" for name, v in (vis.get("geomean_vs_peers") or {}).items() if v)
    lines = [head, f"Visible: {vis['passed']}/{vis['scenarios']} passed; geomean {_fmt(vis['geomean_vs_baseline'])} "
                   f"vs baseline" + (f" ({peers})" if peers else "") + "."]
    rows = data.get("scenarios", [])
    failed = [r for r in rows if r["status"] != "pass"]
    for r in failed[:FAILURES_SHOWN]:
        lines.append(f"  FAILED {r['scenario']}: {r['status']} ({r['reason'] or 'no reason given'})")
    if len(failed) > FAILURES_SHOWN:
        lines.append(f"  ... and {len(failed) - FAILURES_SHOWN} more failures")
    timed = sorted((r for r in rows if r["status"] == "pass" and r.get("speedup_vs_baseline")),
                   key=lambda r: r["speedup_vs_baseline"])
    if timed:
        slow = "; ".join(f"{r['scenario']} {_fmt(r['speedup_vs_baseline'])}"
                         + (f" ({r['tflops']:.1f} TFLOP/s)" if r.get("tflops") else "")
                         for r in timed[:SLOWEST_SHOWN])
        lines.append(f"  slowest vs baseline: {slow}")
    flagged = [r for r in rows if r.get("flags")]
    for r in flagged[:FAILURES_SHOWN]:
        lines.append(f"  FLAGGED {r['scenario']}: {'; '.join(r['flags'])}")
    if hid["scenarios"]:
        lines.append(f"Hidden scenarios (not shown to you): {hid['passed']}/{hid['scenarios']} passed.")
    return "\n".join(lines)


def _read_findings(runner: SessionRunner, call: ToolCall) -> ToolResult:
    with runner.ctx.database.session() as db:
        session = get_session(db, runner.session_id)
        cands = list(candidates_of(db, runner.session_id))
        messages = [i for i in interventions_of(db, runner.session_id) if i.status == DELIVERED]
    leader = next((c for c in cands if c.id == session.leader_id), None)
    if leader is not None:
        lines = [f"Leader: candidate #{leader.number} ({leader.title or 'untitled'}), visible "
                 f"{_fmt(leader.visible_speedup)} vs baseline."]
    else:
        lines = ["Leader: the baseline (no candidate won yet)."]
    lines.append(f"Evaluations so far: {session.evaluations}.")
    if cands:
        lines.append("Candidates (what worked and what did not):")
    for c in cands:
        why = c.verdict_reason[:200] if c.verdict_reason else c.status
        note = f" - notes: {c.notes[:160]}" if c.notes else ""
        lines.append(f"  #{c.number} {c.verdict or c.status} {_fmt(c.visible_speedup)} "
                     f"{c.title or 'untitled'}: {why}{note}")
    if messages:
        lines.append("Messages you received:")
        lines.extend(f"  ({m.kind} from {m.author}) {m.text}" for m in messages)
    data = {"leader": leader.number if leader else None, "evaluations": session.evaluations,
            "candidates": [{"number": c.number, "verdict": c.verdict, "title": c.title,
                            "visible_speedup": c.visible_speedup, "reason": c.verdict_reason} for c in cands],
            "messages": [m.text for m in messages]}
    return ToolResult(call.call_id, call.name, True, "\n".join(lines), data)


def _consult_bank(runner: SessionRunner, call: ToolCall) -> ToolResult:
    from question_bank.agent_tool import ToolInputError, consult_bank
    from question_bank.store import ensure_starter_bank

    with runner.ctx.database.session() as db:
        session = get_session(db, runner.session_id)
        try:
            ensure_starter_bank(db)
            answer = consult_bank(db, call.args, session_ref=str(runner.session_id), problem=session.problem,
                                  eval_index=session.evaluations, leader=session.leader_speedup)
        except ToolInputError as exc:
            return _error(call, str(exc))
        except OperationalError:
            db.rollback()
            return _error(call, "the question bank is not installed in this server's database")
    lines = [f"- {q['text']}" for q in answer["questions"]] or ["The bank has no question for this situation."]
    return ToolResult(call.call_id, call.name, True, "\n".join([*lines, answer["note"]]), answer)
