"""What follows a judged candidate, written once for sessions and campaigns.

A session and a campaign each hold a leader, a goal and a budget. After a verdict, in order:
  leader    a new leader is taken (its event recorded)
  judged    the scope's bookkeeping for every verdict (a session credits its questions)
  goal      checked on a new leader's own report: met, the scope ends
  budget    spent, the scope ends
  onward    otherwise the scope's own next move: a session's suspicious-win and plateau
            triggers; a campaign's next evolution child or its plateau's strategy switch
The session's scope is here; the campaign's is in app/domain/campaigns/hooks.py."""

from __future__ import annotations

from typing import Protocol

from app.domain.sessions import credit_interventions, evaluation_points, fire_trigger, set_status, thresholds
from app.domain.steering import goal as goals
from app.domain.steering import triggers
from app.store.events import Unit
from app.store.models import DONE, LEADER, Candidate, SteeringSession
from harness.report import EvaluationReport


class VerdictScope(Protocol):
    """A session or a campaign, as the after-verdict routine sees it."""

    def take_leader(self, u: Unit, cand: Candidate) -> None: ...

    def judged(self, u: Unit, cand: Candidate) -> None: ...

    def goal(self) -> tuple[str, float | None]:
        """(metric, target); target None: no goal."""
        ...

    def goal_met(self, u: Unit, cand: Candidate, check: goals.GoalCheck) -> None:
        """Record the goal and end the scope."""
        ...

    def budget_spent(self) -> str | None:
        """Why the scope's budget is spent, or None."""
        ...

    def end(self, u: Unit, reason: str) -> None: ...

    def onward(self, u: Unit, cand: Candidate) -> None: ...


def after_verdict(u: Unit, scope: VerdictScope, cand: Candidate, verdict: str,
                  report: EvaluationReport | None) -> str | None:
    """Run the steps above for `cand` judged `verdict`; return why the scope ended, or None."""
    if verdict == LEADER:
        scope.take_leader(u, cand)
    scope.judged(u, cand)
    metric, target = scope.goal()
    if verdict == LEADER and target is not None and report is not None:
        check = goals.check(report, metric, target)
        if check.met:
            scope.goal_met(u, cand, check)
            return f"goal met: {check.reason}"
    spent = scope.budget_spent()
    if spent is not None:
        scope.end(u, spent)
        return spent
    scope.onward(u, cand)
    return None


class SessionScope:
    """A session: its leader, its goal; its budgets (steps, tokens, cost, time) are counted at
    tool boundaries by the runner, so no verdict spends one; onward are its triggers."""

    def __init__(self, session: SteeringSession, leader_before: float | None) -> None:
        self.session = session
        self.leader_before = leader_before

    def take_leader(self, u: Unit, cand: Candidate) -> None:
        s = self.session
        previous = s.leader_id
        s.leader_id, s.leader_speedup = cand.id, cand.speedup
        u.record(s, "leader", {"number": cand.number, "speedup": cand.speedup, "previous_leader_id": previous})

    def judged(self, u: Unit, cand: Candidate) -> None:
        credit_interventions(u, self.session)
        self.session.detail = ""

    def goal(self) -> tuple[str, float | None]:
        return self.session.goal_metric, self.session.goal_target

    def goal_met(self, u: Unit, cand: Candidate, check: goals.GoalCheck) -> None:
        u.record(self.session, "goal_met", {"number": cand.number, "value": check.value, "reason": check.reason})
        set_status(u, self.session, DONE, detail=f"goal met by candidate #{cand.number}: {check.reason}")

    def budget_spent(self) -> str | None:
        return None

    def end(self, u: Unit, reason: str) -> None:
        set_status(u, self.session, DONE, detail=reason)

    def onward(self, u: Unit, cand: Candidate) -> None:
        s = self.session
        t = thresholds(s)
        hit = triggers.check_suspicious_win(cand.number, cand.speedup, self.leader_before, cand.flags, t,
                                           correct=cand.passed == cand.scenario_count)
        if hit is None:
            points = evaluation_points(u.db, s.id or 0)
            before = points[:s.window_start]
            hit = triggers.check_plateau(points[s.window_start:], before[-1].leader_after if before else None, t)
        if hit is not None:
            fire_trigger(u, s, hit)
