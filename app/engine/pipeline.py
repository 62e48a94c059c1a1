"""The candidate pipeline: what happens to one kernel an agent submits, in order.

  store      the candidate row and its `candidate` event (found again after a restart)
  compile    nvcc before the device queue (app/services/evaluation.py: prebuild)
  queue      wait for the device (app/services/devices.py)
  harness    verify and time against the baseline, in the harness's worker processes
  judge      leader, backup or rejected (app/domain/steering/session_judge.py)
  re-time    a contender is timed again, interleaved with the previous leader
  verdict    the candidate's verdict, the leader, credit for the questions before it
  goal       the goal check on a new leader, then the plateau and suspicious-win triggers
  campaign   for a member of a campaign: the campaign judge (re-time against the campaign
             leader), the board, and the campaign's budget, goal, plateau or evolution

It is called by the agent tools (app/engine/tools/) and calls only downward: sessions, steering,
the device queue and the harness. It never reaches the runner; a stop arrives as `cancel`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from app.domain.campaigns import campaign_judge
from app.domain.campaigns import hooks as campaign_hooks
from app.domain.kernel_names import kernel_path
from app.domain.lifecycle import FINAL_STATES
from app.domain.sessions import (
    candidate_by_number,
    candidates_of,
    get_session,
    latest_evaluation,
    suite_report,
    thresholds,
)
from app.domain.steering.session_judge import CONTENDER, Judgement, JudgeSettings, confirm, judge, sanity_flags
from app.domain.verdicts import SessionScope, after_verdict
from app.engine.agents.base import ToolError
from app.engine.runner_state import RunnerState
from app.services import evaluation as ev
from app.services.context import ServerContext
from app.services.devices import CPU, GPU
from app.store.events import LiveNote, Unit
from app.store.models import (
    BACKUP,
    CUDA,
    EVALUATED,
    EVALUATING,
    PYTHON_CPU,
    Candidate,
    Evaluation,
    SteeringSession,
)
from harness.executor import Progress
from harness.report import EvaluationReport
from harness.scenario import Scenario

MAX_SOURCE_BYTES = 512 * 1024


class Stopped(Exception):
    """The session was stopped or finished while a candidate was in the pipeline."""


@dataclasses.dataclass(frozen=True)
class Verdicted:
    """A candidate through the pipeline, and the report the agent may read (None when the
    verdict was recorded before a restart and its report is not stored)."""

    candidate: Candidate
    report: EvaluationReport | None


def session_scenarios(session: SteeringSession) -> list[Scenario]:
    """Every scenario the session's candidates are evaluated on, hidden ones included."""
    if session.scenarios:
        return [Scenario.from_dict(s) for s in session.scenarios]
    if session.candidate_kind == PYTHON_CPU:
        return list(ev.CPU_SCENARIOS)
    from harness.attention.suite import default_suite
    from harness.suite import select as select_scenarios

    return select_scenarios(default_suite(), "all", session.suite_filter)


class CandidatePipeline:
    """One session's pipeline. `state` records which candidate a tool call created, so that a
    call resumed after a restart evaluates that candidate instead of creating a second one."""

    def __init__(self, services: ServerContext, session_id: int, state: RunnerState,
                 cancel: threading.Event) -> None:
        self.services = services
        self.session_id = session_id
        self.state = state
        self.cancel = cancel

    async def submit(self, call_id: str, args: dict[str, Any]) -> Verdicted:
        """Store (or find again), evaluate, judge and record a candidate; check the goal and triggers."""
        candidate = self.store(call_id, args)
        if candidate.status == EVALUATED:  # judged before a restart; its result was not yet saved
            stored = self.suite_report(candidate.id)
            await self.campaign_verdict(candidate, stored, None)  # posts nothing twice
            return Verdicted(candidate, stored)
        report = await self.evaluate(candidate, self.baseline(), purpose="suite")
        with self.services.unit() as u:
            session = get_session(u.db, self.session_id)
            has_leader = session.leader_id is not None
            leader_before = session.leader_speedup
            leader_id_before = session.leader_id
            t = thresholds(session)
        first = judge(report, leader_before, has_leader, JudgeSettings(min_gain=t.min_leader_gain))
        self.store_evaluation(candidate, report, "suite", "baseline", first)
        final = first
        if first.verdict == CONTENDER:
            leader = self.leader_candidate()
            against = f"leader #{leader.number}"
            retime = await self.evaluate(candidate, self.implementation(leader), purpose="retime", label=against)
            final = confirm(retime, first, leader_own=self.suite_report(leader_id_before))
            self.store_evaluation(candidate, retime, "retime", against, final)
        judged = self.record_verdict(candidate, report, final, leader_before)
        await self.campaign_verdict(judged, report, leader_id_before if first.verdict == CONTENDER else None)
        # in the background (this candidate against its parent): the runner goes on at once
        self.services.lessons.schedule(self.session_id, judged.number)
        return Verdicted(judged, report)

    async def campaign_verdict(self, c: Candidate, report: EvaluationReport | None,
                               retimed_against: int | None) -> None:
        """A member of a campaign: the campaign judge (re-timing a contender interleaved against the
        campaign leader, the same re-time as above), then the board, the campaign leader, budget, goal,
        and evolution's next child or the plateau's strategy switch (app/domain/campaigns/hooks.py)."""
        with self.services.database.session() as db:
            look = campaign_hooks.first_look(db, self.session_id, c.id or 0, retimed_against)
        if look is None:
            return
        if look.retime_against is not None:
            leader = look.retime_against
            label = f"campaign leader: session {leader.session_id} #{leader.number}"
            try:
                retime = await self.evaluate(c, self.implementation(leader), purpose="retime", label=label)
            except Stopped:
                look = campaign_judge.CampaignJudgement(BACKUP, "not re-timed against the campaign leader: "
                                                                "the session ended first")
            else:
                look = campaign_judge.after_retime(look, c, retime, self.suite_report(leader.id))
                self.store_evaluation(c, retime, "retime", label, Judgement(look.verdict, look.reason, c.speedup))
        with self.services.unit() as u:
            campaign_hooks.record(u, self.session_id, c.id or 0, report, look)

    def suite_report(self, candidate_id: int | None) -> EvaluationReport | None:
        with self.services.database.session() as db:
            return suite_report(db, candidate_id)

    # -- store ---------------------------------------------------------------------------

    def store(self, call_id: str, args: dict[str, Any]) -> Candidate:
        """The candidate of this call: created now, or found again after a restart."""
        known = self.state.candidate_of_call(call_id)
        with self.services.unit() as u:
            if known is not None:
                existing = u.db.get(Candidate, known)
                if existing is not None:
                    return existing
            session = get_session(u.db, self.session_id)
            source = args.get("source")
            if not isinstance(source, str) or not source.strip():
                raise ToolError("submit_candidate needs the whole kernel as 'source'")
            if len(source.encode()) > MAX_SOURCE_BYTES:
                raise ToolError(f"the source is larger than {MAX_SOURCE_BYTES} bytes")
            if session.candidate_kind == PYTHON_CPU:
                if not self.services.settings.allow_python_candidates:
                    raise ToolError("python-cpu candidates are disabled on this server")
                if not ev.PYTHON_TARGET.match(source.strip()):
                    raise ToolError("a python-cpu candidate is a module:function target")
                source = source.strip()
            number = len(candidates_of(u.db, self.session_id)) + 1
            parent_id = self._parent_id(u, session, args.get("parent"))
            c = Candidate(session_id=self.session_id, number=number, author=session.agent,
                          kind=session.candidate_kind, title=str(args.get("title", ""))[:200],
                          notes=str(args.get("notes", ""))[:4000], source=source, parent_id=parent_id)
            u.db.add(c)
            u.db.flush()
            u.record(session, "candidate", {"candidate_id": c.id, "number": number, "title": c.title,
                                            "author": c.author, "parent_id": parent_id})
            self.state.remember_candidate(u, session, call_id, c.id or 0)
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

    # -- what is evaluated -----------------------------------------------------------------

    def baseline(self) -> ev.Implementation:
        with self.services.unit() as u:
            session = get_session(u.db, self.session_id)
            ref = session.baseline if session.candidate_kind == PYTHON_CPU else str(kernel_path(session.baseline))
            return ev.Implementation(session.candidate_kind, ref, "baseline")

    def leader_candidate(self) -> Candidate:
        with self.services.unit() as u:
            session = get_session(u.db, self.session_id)
            leader = u.db.get(Candidate, session.leader_id or 0)
            assert leader is not None
            return leader

    def implementation(self, c: Candidate) -> ev.Implementation:
        if c.kind == PYTHON_CPU:
            return ev.Implementation(PYTHON_CPU, c.source, f"candidate-{c.number}")
        path = self.services.settings.sources_dir / f"session-{c.session_id}" / f"candidate-{c.number}.cu"
        if not path.is_file() or path.read_text() != c.source:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(c.source)
        return ev.Implementation(CUDA, str(path.resolve()), f"candidate-{c.number}")

    # -- compile, queue, harness -----------------------------------------------------------

    async def evaluate(self, c: Candidate, against: ev.Implementation, purpose: str,
                       label: str | None = None) -> EvaluationReport:
        """`label`: what the speedups are against, in the `evaluation_started` event ("leader #3")."""
        impl = self.implementation(c)
        with self.services.unit() as u:
            scenarios = session_scenarios(get_session(u.db, self.session_id))
        s = self.services.settings
        settings = ev.eval_settings(c.kind, trials=s.trials, timing_budget_ms=s.timing_budget_ms,
                                    scenario_timeout_s=s.scenario_timeout_s, peers=s.peers,
                                    peer_cache_dir=s.peer_cache_dir, peer_cache_hours=s.peer_cache_hours)
        if purpose == "retime":
            settings = dataclasses.replace(settings, peers=())  # only the two kernels, interleaved
        device = GPU if c.kind == CUDA else CPU
        what = f"candidate #{c.number}" + (" (re-time against the leader)" if purpose == "retime" else "")
        await asyncio.to_thread(self.services.evaluator.prebuild, impl, against)  # nvcc runs before the GPU queue
        async with self.services.devices.acquire(device, f"session {self.session_id}: {what}", self._waiting):
            with self.services.unit() as u:
                session = get_session(u.db, self.session_id)
                if session.status in FINAL_STATES or self.cancel.is_set():
                    raise Stopped
                cand = u.db.get(Candidate, c.id)
                assert cand is not None
                cand.status = EVALUATING
                u.db.add(cand)
                session.detail = f"evaluating {what} on {len(scenarios)} scenarios"
                u.record(session, "evaluation_started", {"number": c.number, "purpose": purpose,
                                                         "scenarios": len(scenarios),
                                                         "against": label or against.label})
            progress = self._progress_fn(c.number, purpose)
            evaluate = self.services.evaluator.evaluate
            work = asyncio.ensure_future(asyncio.to_thread(evaluate, impl, against, scenarios, settings,
                                                           progress, self.cancel,
                                                           one_device=purpose == "retime"))
            try:
                report = await asyncio.shield(work)
            except asyncio.CancelledError:
                # Hold the device until the worker processes are gone, then give up.
                self.cancel.set()
                with contextlib.suppress(Exception):
                    await work
                raise
        if self.cancel.is_set():
            raise Stopped
        return report

    def _progress_fn(self, number: int, purpose: str) -> Callable[[Progress], None]:
        hub, sid = self.services.hub, self.session_id

        def progress(p: Progress) -> None:
            hub.publish_threadsafe(LiveNote(sid, "progress", {
                "number": number, "purpose": purpose, "done": p.done, "total": p.total,
                "scenario": p.scenario, "status": p.result.status if p.result else "", "message": p.message,
            }))

        return progress

    async def _waiting(self, reason: str) -> None:
        with self.services.unit() as u:
            session = get_session(u.db, self.session_id)
            if session.detail != reason:
                session.detail = reason
                u.record(session, "waiting", {"reason": reason})

    # -- judge, verdict, goal ------------------------------------------------------------------

    def store_evaluation(self, c: Candidate, report: EvaluationReport, purpose: str, against: str,
                         judgement: Judgement) -> None:
        with self.services.unit() as u:
            session = get_session(u.db, self.session_id)
            e = Evaluation(candidate_id=c.id or 0, purpose=purpose, against=against, report=report.to_dict(),
                           device=report.gpu, seconds=report.seconds)
            u.db.add(e)
            u.db.flush()
            summary = report.summary("all")
            u.record(session, "evaluation", {
                "number": c.number, "purpose": purpose, "against": against, "evaluation_id": e.id,
                "passed": summary.passed, "scenarios": summary.scenarios, "timed": summary.timed,
                "speedup": summary.vs_baseline,
                "visible_speedup": report.summary("visible").vs_baseline, "device": report.gpu,
                "seconds": report.seconds, "judgement": judgement.verdict,
            })

    def record_verdict(self, c: Candidate, report: EvaluationReport, final: Judgement,
                       leader_before: float | None) -> Candidate:
        with self.services.unit() as u:
            session = get_session(u.db, self.session_id)
            cand = u.db.get(Candidate, c.id)
            assert cand is not None
            total, visible = report.summary("all"), report.summary("visible")
            cand.status = EVALUATED
            cand.verdict = final.verdict
            cand.verdict_reason = final.reason
            cand.speedup = total.vs_baseline
            cand.visible_speedup = visible.vs_baseline
            cand.passed, cand.scenario_count = total.passed, total.scenarios
            cand.flags = sanity_flags(report)
            retime = latest_evaluation(u.db, cand.id or 0, "retime")
            if retime is not None:
                cand.retime_speedup = EvaluationReport.from_dict(retime.report).summary("all").vs_baseline
            u.db.add(cand)
            session.evaluations += 1
            u.record(session, "verdict", {"number": cand.number, "verdict": final.verdict, "reason": final.reason,
                                          "speedup": cand.speedup, "visible_speedup": cand.visible_speedup})
            after_verdict(u, SessionScope(session, leader_before), cand, final.verdict, report)
            return cand
