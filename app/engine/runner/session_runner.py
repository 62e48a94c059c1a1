"""The session runner: one asyncio task per running session, the loop and nothing else. It
asks the agent for a step, runs the step's tool calls through the tool table (app/engine/tools/;
a candidate goes down the pipeline, app/engine/pipeline.py), stops at tool boundaries
(pause, stop, budgets, the bank's auto-ask: app/engine/runner/pause.py), and delivers steering at
tool boundaries (steer) or at the end of a turn (queue).

Everything it decides is written as events in the same transaction as the change; its
progress (agent snapshot, the step in flight, results so far, the next feedback) is saved
through RunnerState (app/engine/runner_state.py), so a restarted server resumes where it stopped.

A session holds one agent today. Several agents sharing a board of findings (a later
issue) means one AgentSlot per agent, each with its own runner_state entry and loop, all
feeding the same judge and leader; the tool layer already records the author of every
candidate and event."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from dataclasses import replace
from typing import Any

from app.domain.kernel_names import kernel_source
from app.domain.lessons import session_knowledge
from app.domain.lifecycle import FINAL_STATES
from app.domain.sessions import (
    budget_of,
    budget_use,
    candidates_of,
    deliverable,
    fire_trigger,
    get_session,
    mark_delivered,
    set_status,
    thresholds,
)
from app.domain.steering import goal as goals
from app.domain.steering import triggers
from app.engine.agents.base import (
    Agent,
    AgentConfigError,
    AgentStep,
    Feedback,
    SteeringMessage,
    Task,
    ToolCall,
    ToolResult,
)
from app.engine.agents.registry import make_agent
from app.engine.pipeline import CandidatePipeline, Stopped, session_scenarios
from app.engine.runner.pause import wait_while_paused
from app.engine.runner_state import RunnerState
from app.engine.tools.base import ToolContext
from app.engine.tools.table import ACTING_TOOLS, WORKSPACE_TOOL_SPECS, dispatch
from app.services import evaluation as ev
from app.services.context import ServerContext
from app.store.events import LiveNote
from app.store.models import EVALUATING, FAILED, PAUSED, PYTHON_CPU, QUEUED, RUNNING, Candidate, SteeringSession

log = logging.getLogger("socratic.runner")


def starting_leader(leader: Candidate | None) -> dict[str, Any] | None:
    """The session's leader as the agent is told of it when it starts (a fork's starting
    candidate: app/engine/fork.py); None without one."""
    if leader is None:
        return None
    return {"number": leader.number, "title": leader.title, "source": leader.source, "speedup": leader.speedup,
            "visible_speedup": leader.visible_speedup, "origin": leader.verdict_reason}


class SessionRunner:
    def __init__(self, ctx: ServerContext, session_id: int) -> None:
        self.ctx = ctx
        self.session_id = session_id
        self.wake = asyncio.Event()
        self.cancel = threading.Event()  # cancels the evaluation in flight
        self.stop_requested = False
        self.task: asyncio.Task[None] | None = None
        self._tick = time.monotonic()
        self.state = RunnerState()
        self.tools: ToolContext | None = None  # what tool handlers receive; built with the agent

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
            self.ctx.lessons.schedule(self.session_id)  # the session's end: its lessons, in the background
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
            knowledge = session_knowledge(u.db, session, [str(x.get("category", "")) for x in task.visible_scenarios],
                                          self.ctx.settings.lessons_prompt_tokens)
            leader = u.db.get(Candidate, session.leader_id) if session.leader_id else None
            task = replace(task, knowledge=knowledge.prompt, priors=knowledge.priors, leader=starting_leader(leader))
            u.record(session, "knowledge", knowledge.event())
            self.state = RunnerState.load(session)
            pipeline = CandidatePipeline(self.ctx, self.session_id, self.state, self.cancel)
            self.tools = ToolContext(self.session_id, self.ctx, self.state, self.cancel, task, pipeline)
            agent = make_agent(session.agent, task, session.agent_config)
            if self.state.get("agent"):
                agent.restore(self.state.get("agent"))
            return agent

    async def _loop(self, agent: Agent) -> None:
        feedback = Feedback.from_dict(self.state.get("feedback")) if self.state.get("feedback") else Feedback()
        step = AgentStep.from_dict(self.state.get("step")) if self.state.get("step") else None
        results = [ToolResult.from_dict(r) for r in self.state.get("results", [])]
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
            if not self.state.get("step_checked"):  # not twice when resumed after a restart
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
            await wait_while_paused(self.ctx, self.session_id, self.wake)
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
            self.state.save(u, session, agent=agent.snapshot(), step=step.to_dict(), results=[], feedback=None,
                       call_candidates={}, step_checked=False)

    def _end_of_step(self, step: AgentStep) -> None:
        """After the step's calls: the agent's words may declare a limit; a turn that ends
        with nothing queued for the agent is a declared limit too. A turn that ends with a
        person's message waiting gets that message instead of a pause."""
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            waiting = bool(deliverable(u.db, self.session_id, turn_ended=True)) if step.ends_turn else False
            if waiting:  # the turn ended and a person's message is waiting: it answers the moment
                self.state.save(u, session, step_checked=True)
                return
            hit = triggers.check_declared_limit(step.text, thresholds(session))
            if hit is None and step.ends_turn:
                hit = triggers.ended_turn(step.text)
            if hit is not None:
                fire_trigger(u, session, hit)
            self.state.save(u, session, step_checked=True)

    def _deliver(self, agent: Agent, results: list[ToolResult], turn_ended: bool) -> Feedback:
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            items = deliverable(u.db, self.session_id, turn_ended)
            mark_delivered(u, session, items)
            messages = [SteeringMessage(i.id or 0, i.kind, i.mode, i.text, i.author) for i in items]
            feedback = Feedback(results=results, messages=messages, turn_ended=turn_ended)
            self.state.save(u, session, agent=agent.snapshot(), step=None, results=[], feedback=feedback.to_dict(),
                       call_candidates={}, step_checked=False)
            return feedback

    # -- tools -----------------------------------------------------------------------------

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run one tool call through the tool table and record its result."""
        assert self.tools is not None, "the runner builds its tool context with the agent"
        result = await dispatch(call, self.tools)
        with self.ctx.unit() as u:
            session = get_session(u.db, self.session_id)
            u.record(session, "tool_result", {"call_id": call.call_id, "name": call.name, "ok": result.ok,
                                              "text": result.text[:4000]})
            self.state.add_result(u, session, result.to_dict())
        return result

    def _task(self, session: SteeringSession) -> Task:
        if session.candidate_kind == PYTHON_CPU:
            baseline_source = session.baseline
        else:
            baseline_source = kernel_source(session.baseline) or ""
        visible = [s.to_dict() for s in session_scenarios(session) if not s.hidden]
        return Task(session.problem, session.candidate_kind,
                    goals.describe(session.goal_metric, session.goal_target), baseline_source, visible,
                    tools=WORKSPACE_TOOL_SPECS, acting_tools=ACTING_TOOLS, session_id=session.id or 0,
                    contract=ev.contract_text(session.candidate_kind))

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


def _call_summary(call: ToolCall) -> dict[str, Any]:
    args = dict(call.args)
    if "source" in args:
        source = str(args.pop("source"))
        args["source_lines"] = source.count("\n") + 1
        if len(source) < 200:
            args["source"] = source
    return {"name": call.name, "call_id": call.call_id, "args": args}
