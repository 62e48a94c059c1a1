"""The session runner: one asyncio task per running session. It asks the agent for a step,
executes the step's tool calls (candidates go through the device queue to the harness, in
worker processes), lets the strict judge decide, checks the goal and the triggers, and
delivers steering at tool boundaries (steer) or at the end of a turn (queue).

Everything it decides is written as events in the same transaction as the change; its
progress (agent snapshot, the step in flight, results so far, the next feedback) is saved
in the session's runner_state, so a restarted server resumes exactly where it stopped.

A session holds one agent today. Several agents sharing a board of findings (a later
issue) means one AgentSlot per agent, each with its own runner_state entry and loop, all
feeding the same judge and leader; the tool layer already records the author of every
candidate and event."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from app.agents.base import (
    DECLARE_DONE,
    LIST_CANDIDATES,
    READ_CANDIDATE,
    SUBMIT_CANDIDATE,
    Agent,
    AgentConfigError,
    AgentStep,
    Feedback,
    SteeringMessage,
    Task,
    ToolCall,
    ToolResult,
)
from app.agents.registry import make_agent
from app.agents.toolset import RUNNER_WORKSPACE_TOOLS
from app.context import ServerContext
from app.events import LiveNote, Unit
from app.kernel_names import kernel_path, kernel_source
from app.models import (
    CUDA,
    DONE,
    EVALUATED,
    EVALUATING,
    FAILED,
    LEADER,
    PAUSED,
    PYTHON_CPU,
    QUEUED,
    RUNNING,
    Candidate,
    Evaluation,
    SteeringSession,
)
from app.runner import evaluation as ev
from app.runner.devices import CPU, GPU
from app.runner.states import FINAL_STATES
from app.runner.workspace import run_workspace_tool
from app.sessions import (
    budget_of,
    budget_use,
    candidate_by_number,
    candidates_of,
    credit_interventions,
    deliverable,
    evaluation_points,
    fire_trigger,
    get_session,
    mark_delivered,
    set_status,
    thresholds,
)
from app.steering import bank, triggers
from app.steering import goal as goals
from app.steering.judge import CONTENDER, Judgement, JudgeSettings, confirm, judge, sanity_flags
from harness.executor import Progress
from harness.report import EvaluationReport
from harness.scenario import Scenario

log = logging.getLogger("socratic.runner")

MAX_SOURCE_BYTES = 512 * 1024


class Stopped(Exception):
    """The session was stopped or finished; the runner ends quietly."""


class SessionRunner:
    def __init__(self, ctx: ServerContext, session_id: int) -> None:
        self.ctx = ctx
        self.session_id = session_id
        self.wake = asyncio.Event()
        self.cancel = threading.Event()  # cancels the evaluation in flight
        self.stop_requested = False
        self.task: asyncio.Task[None] | None = None
        self._tick = time.monotonic()
        self._state: dict[str, Any] = {}

    # -- control (called by the manager) -----------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self.run(), name=f"session-{self.session_id}")
        return self.task

    def request_stop(self) -> None:
        """Stop now, wherever the runner waits (the agent, a device, an evaluation): the task
        is cancelled and the evaluation in flight is killed by the harness executor."""
        self.stop_requested = True
        self.cancel.set()
        self.wake.set()
        if self.task is not None and not self.task.done():
            self.task.cancel()

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()

    # -- main loop -------------------------------------------------------------------------

    async def run(self) -> None:
        agent: Agent | None = None
        try:
            agent = self._make_agent()
            await self._loop(agent)
        except Stopped:
            pass
        except asyncio.CancelledError:
            if not self.stop_requested:
                raise  # the server is shutting down: the session stays running -> interrupted
        except AgentConfigError as exc:
            self._fail(f"the agent cannot run: {exc}")
        except Exception as exc:
            log.exception("session %s failed", self.session_id)
            self._fail(f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=8))
        finally:
            self._cancel_unfinished_candidates()
            if agent is not None:
                try:
                    await agent.close()
                except Exception:
                    log.exception("closing the agent of session %s", self.session_id)

    def _make_agent(self) -> Agent:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            if session.read_only:  # imported from a trace: audited, never resumed
                log.warning("session %s is read-only (imported); its runner does not start", self.session_id)
                raise Stopped
            task = self._task(session)
            self._state = dict(session.runner_state or {})
            agent = make_agent(session.agent, task, session.agent_config)
            if self._state.get("agent"):
                agent.restore(self._state["agent"])
            return agent

    async def _loop(self, agent: Agent) -> None:
        feedback = Feedback.from_dict(self._state["feedback"]) if self._state.get("feedback") else Feedback()
        step = AgentStep.from_dict(self._state["step"]) if self._state.get("step") else None
        results = [ToolResult.from_dict(r) for r in self._state.get("results", [])]
        while True:
            if step is None:
                await self.boundary()
                self._note("activity", {"detail": "the agent is thinking"})
                step = await self._agent_step(agent, feedback)
                self._after_step(agent, step)
                results = []
            for call in step.tool_calls[len(results):]:
                result = await self.execute(call)
                results.append(result)
                agent.tool_done(result)
                if len(results) < len(step.tool_calls):
                    await self.boundary()
            if not self._state.get("step_checked"):  # not twice when resumed after a restart
                self._end_of_step(step)
            await self.boundary()
            feedback = self._deliver(agent, results, step.ends_turn)
            step = None

    async def _agent_step(self, agent: Agent, feedback: Feedback) -> AgentStep:
        """The agent's next step. A model call or an outside (MCP) client can take long: a stop
        request ends the wait instead of waiting for it. An agent that only waits for an outside
        client is interrupted by a pause too: the runner waits out the pause at this boundary,
        delivers what was sent meanwhile, and asks again."""
        thinking = asyncio.ensure_future(agent.step(feedback))
        while True:
            self.wake.clear()
            woken = asyncio.ensure_future(self.wake.wait())
            done, _ = await asyncio.wait({thinking, woken}, return_when=asyncio.FIRST_COMPLETED)
            if thinking in done:
                woken.cancel()
                return thinking.result()
            if self.stop_requested:
                thinking.cancel()
                raise Stopped
            if agent.waits_for_outside and self._paused():
                thinking.cancel()
                await self.boundary()
                thinking = asyncio.ensure_future(agent.step(self._deliver(agent, [], turn_ended=False)))

    def _paused(self) -> bool:
        with self.ctx.database.session() as db:
            return get_session(db, self.session_id).status == PAUSED

    # -- boundaries: pause, stop, budget, time accounting ------------------------------------

    async def boundary(self) -> None:
        """A tool boundary: account running time, stop if asked, pause on a budget, and wait
        while the session is paused (for a person, or for the bank if its auto-ask is on)."""
        while True:
            self.wake.clear()
            with self.ctx.unit() as u:
                session = get_session(u.db, self.session_id)
                self._account_time(session)
                if session.status in FINAL_STATES or self.stop_requested:
                    raise Stopped
                if session.status == RUNNING:
                    hit = triggers.check_budget(budget_use(session), budget_of(session))
                    if hit is None:
                        u.db.add(session)
                        return
                    fire_trigger(u, session, hit)
                else:
                    u.db.add(session)
            self._note("activity", {"detail": "paused"})
            await bank.wait_while_paused(self.ctx, self.session_id, self.wake)
            self._tick = time.monotonic()

    def _account_time(self, session: SteeringSession) -> None:
        now = time.monotonic()
        if session.status == RUNNING:
            session.used_seconds += now - self._tick
        self._tick = now

    # -- steps -----------------------------------------------------------------------------

    def _after_step(self, agent: Agent, step: AgentStep) -> None:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            session.used_steps += 1
            session.used_tokens += step.usage.tokens
            session.used_cost_usd += step.usage.cost_usd
            for call in step.model_calls:
                u.record(session, "model_call", {"agent": session.agent, **call})
            u.record(session, "agent_step", {
                "agent": session.agent, "text": step.text,
                "tool_calls": [_call_summary(c) for c in step.tool_calls],
                "usage": {"input_tokens": step.usage.input_tokens, "output_tokens": step.usage.output_tokens,
                          "cache_read_tokens": step.usage.cache_read_tokens,
                          "cache_write_tokens": step.usage.cache_write_tokens,
                          "cost_usd": step.usage.cost_usd},
            })
            self._save(u, session, agent=agent.snapshot(), step=step.to_dict(), results=[], feedback=None,
                       call_candidates={}, step_checked=False)

    def _end_of_step(self, step: AgentStep) -> None:
        """After the step's calls: the agent's words may declare a limit; a turn that ends
        with nothing queued for the agent is a declared limit too. A turn that ends with a
        person's message waiting gets that message instead of a pause."""
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            waiting = bool(deliverable(u.db, self.session_id, turn_ended=True)) if step.ends_turn else False
            if waiting:  # the turn ended and a person's message is waiting: it answers the moment
                self._save(u, session, step_checked=True)
                return
            hit = triggers.check_declared_limit(step.text, thresholds(session))
            if hit is None and step.ends_turn:
                hit = triggers.ended_turn(step.text)
            if hit is not None:
                fire_trigger(u, session, hit)
            self._save(u, session, step_checked=True)

    def _deliver(self, agent: Agent, results: list[ToolResult], turn_ended: bool) -> Feedback:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            items = deliverable(u.db, self.session_id, turn_ended)
            mark_delivered(u, session, items)
            messages = [SteeringMessage(i.id or 0, i.kind, i.mode, i.text, i.author) for i in items]
            feedback = Feedback(results=results, messages=messages, turn_ended=turn_ended)
            self._save(u, session, agent=agent.snapshot(), step=None, results=[], feedback=feedback.to_dict(),
                       call_candidates={}, step_checked=False)
            return feedback

    def _save(self, u: Unit, session: SteeringSession, **changes: Any) -> None:
        self._state.update(changes)
        session.runner_state = dict(self._state)
        u.db.add(session)

    # -- tools -----------------------------------------------------------------------------

    async def execute(self, call: ToolCall) -> ToolResult:
        try:
            if call.name == SUBMIT_CANDIDATE:
                result = await self._submit(call)
            elif call.name == READ_CANDIDATE:
                result = self._read(call)
            elif call.name == LIST_CANDIDATES:
                result = self._list(call)
            elif call.name == DECLARE_DONE:
                result = self._declare_done(call)
            elif call.name in RUNNER_WORKSPACE_TOOLS:
                result = await run_workspace_tool(self, call)
            else:
                result = ToolResult(call.call_id, call.name, False, f"unknown tool {call.name!r}")
        except ToolError as exc:
            result = ToolResult(call.call_id, call.name, False, str(exc))
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            u.record(session, "tool_result", {"call_id": call.call_id, "name": call.name, "ok": result.ok,
                                              "text": result.text[:4000]})
            self._save(u, session, results=[*self._state.get("results", []), result.to_dict()])
        return result

    def _read(self, call: ToolCall) -> ToolResult:
        from app.runner.tools import describe_evaluation, visible_results

        with self.ctx.unit() as u:
            try:
                c = candidate_by_number(u.db, self.session_id, int(call.args.get("number", 0)))
            except (LookupError, ValueError) as exc:
                raise ToolError(str(exc)) from exc
            evals = u.db.exec(_suite_evaluation(c.id or 0)).first()
        text = f"Candidate #{c.number} source:\n{c.source}"
        data: dict[str, Any] = {"number": c.number, "source": c.source}
        if evals is not None:
            view = visible_results(EvaluationReport.from_dict(evals.report))
            text += "\n\n" + describe_evaluation(c, view)
            data["results"] = view
        return ToolResult(call.call_id, call.name, True, text, data)

    def _list(self, call: ToolCall) -> ToolResult:
        from app.runner.tools import describe_candidates

        with self.ctx.unit() as u:
            cands = list(candidates_of(u.db, self.session_id))
        return ToolResult(call.call_id, call.name, True, describe_candidates(cands),
                          {"candidates": [{"number": c.number, "verdict": c.verdict, "title": c.title,
                                           "visible_speedup": c.visible_speedup} for c in cands]})

    def _declare_done(self, call: ToolCall) -> ToolResult:
        reason = str(call.args.get("reason", ""))
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            fire_trigger(u, session, triggers.declared_done(reason))
            goal = goals.describe(session.goal_metric, session.goal_target)
            leader = session.leader_speedup
        return ToolResult(call.call_id, call.name, True,
                          "Noted. A person will review it. The session's goal is checked by the harness "
                          f"({goal}); the leader is at {leader or 1.0:.3f}x.")

    # -- candidates ------------------------------------------------------------------------

    async def _submit(self, call: ToolCall) -> ToolResult:
        from app.runner.tools import describe_evaluation, visible_results

        candidate = self._candidate_for(call)
        if candidate.status == EVALUATED:  # judged before a restart; its result was not yet saved
            return self._stored_result(call, candidate)
        report = await self._evaluate(candidate, self._baseline(), purpose="suite")
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            has_leader = session.leader_id is not None
            leader_before = session.leader_speedup
            t = thresholds(session)
        first = judge(report, leader_before, has_leader, JudgeSettings(min_gain=t.min_leader_gain))
        self._store_evaluation(candidate, report, "suite", "baseline", first)
        final = first
        if first.verdict == CONTENDER:
            previous = self._leader_implementation()
            retime = await self._evaluate(candidate, previous, purpose="retime")
            final = confirm(retime, first)
            self._store_evaluation(candidate, retime, "retime", f"leader {previous.label}", final)
        c = self._record_verdict(candidate, report, final, leader_before)
        view = visible_results(report)
        return ToolResult(call.call_id, call.name, True, describe_evaluation(c, view),
                          {"number": c.number, "verdict": c.verdict, "reason": c.verdict_reason, **view})

    def _stored_result(self, call: ToolCall, c: Candidate) -> ToolResult:
        from app.runner.tools import describe_evaluation, visible_results

        with self.ctx.unit() as u:
            stored = u.db.exec(_suite_evaluation(c.id or 0)).first()
        view = visible_results(EvaluationReport.from_dict(stored.report)) if stored else {}
        text = describe_evaluation(c, view) if view else f"Candidate #{c.number}: {c.verdict} - {c.verdict_reason}"
        return ToolResult(call.call_id, call.name, True, text,
                          {"number": c.number, "verdict": c.verdict, "reason": c.verdict_reason, **view})

    def _candidate_for(self, call: ToolCall) -> Candidate:
        """The candidate of this call: created now, or found again after a restart."""
        from app.runner.evaluation import PYTHON_TARGET

        known = self._state.get("call_candidates", {}).get(call.call_id)
        with self.ctx.unit() as u:
            if known is not None:
                existing = u.db.get(Candidate, known)
                if existing is not None:
                    return existing
            session = get_session(u.db, self.session_id)
            source = call.args.get("source")
            if not isinstance(source, str) or not source.strip():
                raise ToolError("submit_candidate needs the whole kernel as 'source'")
            if len(source.encode()) > MAX_SOURCE_BYTES:
                raise ToolError(f"the source is larger than {MAX_SOURCE_BYTES} bytes")
            if session.candidate_kind == PYTHON_CPU:
                if not self.ctx.settings.allow_python_candidates:
                    raise ToolError("python-cpu candidates are disabled on this server")
                if not PYTHON_TARGET.match(source.strip()):
                    raise ToolError("a python-cpu candidate is a module:function target")
                source = source.strip()
            number = len(candidates_of(u.db, self.session_id)) + 1
            parent_id = self._parent_id(u, session, call.args.get("parent"))
            c = Candidate(session_id=self.session_id, number=number, author=session.agent,
                          kind=session.candidate_kind, title=str(call.args.get("title", ""))[:200],
                          notes=str(call.args.get("notes", ""))[:4000], source=source, parent_id=parent_id)
            u.db.add(c)
            u.db.flush()
            u.record(session, "candidate", {"candidate_id": c.id, "number": number, "title": c.title,
                                            "author": c.author, "parent_id": parent_id})
            self._save(u, session, call_candidates={**self._state.get("call_candidates", {}), call.call_id: c.id})
            return c

    def _parent_id(self, u: Unit, session: SteeringSession, parent: Any) -> int | None:
        if parent in (None, ""):
            return None
        if parent == "leader":
            return session.leader_id
        try:
            return candidate_by_number(u.db, self.session_id, int(parent)).id
        except (LookupError, ValueError, TypeError) as exc:
            raise ToolError(f"parent: there is no candidate {parent!r}") from exc

    def _baseline(self) -> ev.Implementation:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            ref = session.baseline if session.candidate_kind == PYTHON_CPU else str(kernel_path(session.baseline))
            return ev.Implementation(session.candidate_kind, ref, "baseline")

    def _leader_implementation(self) -> ev.Implementation:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            leader = u.db.get(Candidate, session.leader_id or 0)
            assert leader is not None
            return self._implementation(leader)

    def _implementation(self, c: Candidate) -> ev.Implementation:
        if c.kind == PYTHON_CPU:
            return ev.Implementation(PYTHON_CPU, c.source, f"candidate-{c.number}")
        path = self.ctx.settings.sources_dir / f"session-{self.session_id}" / f"candidate-{c.number}.cu"
        if not path.is_file() or path.read_text() != c.source:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(c.source)
        return ev.Implementation(CUDA, str(path.resolve()), f"candidate-{c.number}")

    def _scenarios(self, session: SteeringSession) -> list[Scenario]:
        if session.scenarios:
            return [Scenario.from_dict(s) for s in session.scenarios]
        if session.candidate_kind == PYTHON_CPU:
            return list(ev.CPU_SCENARIOS)
        from harness.attention.suite import default_suite
        from harness.suite import select

        return select(default_suite(), "all", session.suite_filter)

    def _task(self, session: SteeringSession) -> Task:
        if session.candidate_kind == PYTHON_CPU:
            baseline_source = session.baseline
        else:
            baseline_source = kernel_source(session.baseline) or ""
        visible = [s.to_dict() for s in self._scenarios(session) if not s.hidden]
        return Task(session.problem, session.candidate_kind,
                    goals.describe(session.goal_metric, session.goal_target), baseline_source, visible,
                    session_id=session.id or 0)

    async def _evaluate(self, c: Candidate, against: ev.Implementation, purpose: str) -> EvaluationReport:
        impl = self._implementation(c)
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            scenarios = self._scenarios(session)
        s = self.ctx.settings
        settings = ev.eval_settings(c.kind, trials=s.trials, timing_budget_ms=s.timing_budget_ms,
                                    scenario_timeout_s=s.scenario_timeout_s, peers=s.peers,
                                    peer_cache_dir=s.peer_cache_dir, peer_cache_hours=s.peer_cache_hours)
        if purpose == "retime":
            settings = dataclasses.replace(settings, peers=())  # only the two kernels, interleaved
        device = GPU if c.kind == CUDA else CPU
        what = f"candidate #{c.number}" + (" (re-time against the leader)" if purpose == "retime" else "")
        await asyncio.to_thread(ev.prebuild, impl, against)  # nvcc runs before the GPU queue
        async with self.ctx.devices.acquire(device, f"session {self.session_id}: {what}", self._waiting):
            with self.ctx.unit() as u:
                session = get_session(u.db, self.session_id)
                if session.status in FINAL_STATES or self.stop_requested:
                    raise Stopped
                cand = u.db.get(Candidate, c.id)
                assert cand is not None
                cand.status = EVALUATING
                u.db.add(cand)
                session.detail = f"evaluating {what} on {len(scenarios)} scenarios"
                u.record(session, "evaluation_started", {"number": c.number, "purpose": purpose,
                                                         "scenarios": len(scenarios), "against": against.label})
            progress = self._progress_fn(c.number, purpose)
            work = asyncio.ensure_future(asyncio.to_thread(ev.evaluate, impl, against, scenarios, settings,
                                                           progress, self.cancel))
            try:
                report = await asyncio.shield(work)
            except asyncio.CancelledError:
                # Hold the device until the worker processes are gone, then give up.
                self.cancel.set()
                with contextlib.suppress(Exception):
                    await work
                raise
        if self.cancel.is_set() or self.stop_requested:
            raise Stopped
        return report

    def _progress_fn(self, number: int, purpose: str) -> Callable[[Progress], None]:
        hub, sid = self.ctx.hub, self.session_id

        def progress(p: Progress) -> None:
            hub.publish_threadsafe(LiveNote(sid, "progress", {
                "number": number, "purpose": purpose, "done": p.done, "total": p.total,
                "scenario": p.scenario, "status": p.result.status if p.result else "", "message": p.message,
            }))

        return progress

    async def _waiting(self, reason: str) -> None:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            if session.detail != reason:
                session.detail = reason
                u.record(session, "waiting", {"reason": reason})

    def _store_evaluation(self, c: Candidate, report: EvaluationReport, purpose: str, against: str,
                          judgement: Judgement) -> None:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            e = Evaluation(candidate_id=c.id or 0, purpose=purpose, against=against, report=report.to_dict(),
                           device=report.gpu, seconds=report.seconds)
            u.db.add(e)
            u.db.flush()
            summary = report.summary("all")
            u.record(session, "evaluation", {
                "number": c.number, "purpose": purpose, "against": against, "evaluation_id": e.id,
                "passed": summary.passed, "scenarios": summary.scenarios, "speedup": summary.vs_baseline,
                "visible_speedup": report.summary("visible").vs_baseline, "device": report.gpu,
                "seconds": report.seconds, "judgement": judgement.verdict,
            })

    def _record_verdict(self, c: Candidate, report: EvaluationReport, final: Judgement,
                        leader_before: float | None) -> Candidate:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            cand = u.db.get(Candidate, c.id)
            assert cand is not None
            total, visible = report.summary("all"), report.summary("visible")
            flags = sanity_flags(report)
            cand.status = EVALUATED
            cand.verdict = final.verdict
            cand.verdict_reason = final.reason
            cand.speedup = total.vs_baseline
            cand.visible_speedup = visible.vs_baseline
            cand.passed, cand.scenario_count = total.passed, total.scenarios
            cand.flags = flags
            retime = u.db.exec(_retime_evaluation(cand.id or 0)).first()
            if retime is not None:
                cand.retime_speedup = EvaluationReport.from_dict(retime.report).summary("all").vs_baseline
            u.db.add(cand)
            session.evaluations += 1
            u.record(session, "verdict", {"number": cand.number, "verdict": final.verdict, "reason": final.reason,
                                          "speedup": cand.speedup, "visible_speedup": cand.visible_speedup})
            if final.verdict == LEADER:
                previous = session.leader_id
                session.leader_id = cand.id
                session.leader_speedup = cand.speedup
                u.record(session, "leader", {"number": cand.number, "speedup": cand.speedup,
                                             "previous_leader_id": previous})
            credit_interventions(u, session)
            session.detail = ""
            self._check_after_verdict(u, session, cand, report, leader_before)
            return cand

    def _check_after_verdict(self, u: Unit, session: SteeringSession, cand: Candidate,
                             report: EvaluationReport, leader_before: float | None) -> None:
        t = thresholds(session)
        if cand.verdict == LEADER and session.goal_target is not None:
            check = goals.check(report, session.goal_metric, session.goal_target)
            if check.met:
                u.record(session, "goal_met", {"number": cand.number, "value": check.value, "reason": check.reason})
                set_status(u, session, DONE, detail=f"goal met by candidate #{cand.number}: {check.reason}")
                return
        hit = triggers.check_suspicious_win(cand.number, cand.speedup, leader_before, cand.flags, t,
                                           correct=cand.passed == cand.scenario_count)
        if hit is None:
            points = evaluation_points(u.db, self.session_id)[session.window_start:]
            before = evaluation_points(u.db, self.session_id)[:session.window_start]
            hit = triggers.check_plateau(points, before[-1].leader_after if before else None, t)
        if hit is not None:
            fire_trigger(u, session, hit)

    # -- endings ---------------------------------------------------------------------------

    def _fail(self, reason: str, trace: str = "") -> None:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            if session.status in (RUNNING, PAUSED):
                set_status(u, session, FAILED, detail=reason, payload={"traceback": trace})

    def _cancel_unfinished_candidates(self) -> None:
        if not self.stop_requested:
            return
        try:
            with self.ctx.unit() as u:
                for c in candidates_of(u.db, self.session_id):
                    if c.status in (QUEUED, EVALUATING):
                        c.status = "cancelled"
                        c.verdict_reason = "the session was stopped before its evaluation finished"
                        u.db.add(c)
        except Exception:
            log.exception("marking cancelled candidates of session %s", self.session_id)

    def _note(self, kind: str, payload: dict[str, Any]) -> None:
        self.ctx.hub.publish(LiveNote(self.session_id, kind, payload))


class ToolError(Exception):
    """A tool call the runner refuses; the agent gets the message as the tool's result."""


def _call_summary(call: ToolCall) -> dict[str, Any]:
    args = dict(call.args)
    if "source" in args:
        source = str(args.pop("source"))
        args["source_lines"] = source.count("\n") + 1
        if len(source) < 200:
            args["source"] = source
    return {"name": call.name, "call_id": call.call_id, "args": args}


def _suite_evaluation(candidate_id: int) -> Any:
    from sqlmodel import col, select

    return (select(Evaluation).where(Evaluation.candidate_id == candidate_id, Evaluation.purpose == "suite")
            .order_by(col(Evaluation.id).desc()))


def _retime_evaluation(candidate_id: int) -> Any:
    from sqlmodel import col, select

    return (select(Evaluation).where(Evaluation.candidate_id == candidate_id, Evaluation.purpose == "retime")
            .order_by(col(Evaluation.id).desc()))
