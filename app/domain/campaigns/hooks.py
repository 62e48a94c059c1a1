"""What the candidate pipeline (app/engine/pipeline.py) calls after a member session's verdict:
`first_look` (the campaign judge's verdict, or the leader to re-time against) and `record`
(post to the board, move the campaign leader, the budget and the goal over all members, then
evolution's next child or the plateau's strategy switch). Idempotent per candidate: a verdict
replayed after a restart posts nothing twice."""

from __future__ import annotations

from sqlmodel import Session, col, select

from app.domain.campaigns import board, evolution
from app.domain.campaigns.campaign_judge import CampaignJudgement, first_verdict, on_plateau, still_leads
from app.domain.campaigns.members import members_of
from app.domain.lifecycle import FINAL_STATES
from app.domain.schemas import InterventionCreate
from app.domain.sessions import Conflict, send_message, stop
from app.domain.steering import goal as goals
from app.domain.verdicts import after_verdict
from app.store.campaign_models import (
    BACKUP,
    CAMPAIGN_VERDICTS,
    EVOLUTION_MODE,
    FINISHED,
    LEADER,
    BoardEntry,
    Campaign,
    CampaignMember,
)
from app.store.events import Unit
from app.store.models import Candidate, SteeringSession
from harness.report import EvaluationReport

try:
    from kernels.attention.family import LAYERS as STRATEGIES
except ImportError:  # pragma: no cover - the family ships with the repository
    STRATEGIES = ("tiling", "memory", "math", "scheduling", "masking")

SWITCH_PREFIX = "Switch strategy:"  # the offline agent reads the layer after it (app/engine/agents/offline.py)


def first_look(db: Session, session_id: int, candidate_id: int, retimed_against: int | None) -> \
        CampaignJudgement | None:
    """None when the session is in no campaign (or the candidate is on the board already)."""
    found = board.member_of(db, session_id)
    if found is None or found[0].read_only:
        return None
    if db.exec(select(BoardEntry.id).where(BoardEntry.candidate_id == candidate_id)).first() is not None:
        return None
    cand = db.get(Candidate, candidate_id)
    if cand is None:
        return None
    return first_verdict(db, found[0], cand, retimed_against)


def record(u: Unit, session_id: int, candidate_id: int, report: EvaluationReport | None,
           judgement: CampaignJudgement) -> BoardEntry | None:
    found = board.member_of(u.db, session_id)
    cand = u.db.get(Candidate, candidate_id)
    session = u.db.get(SteeringSession, session_id)
    if found is None or cand is None or session is None:
        return None
    campaign, member = found
    if judgement.verdict not in CAMPAIGN_VERDICTS:
        raise ValueError(f"a campaign verdict is one of {', '.join(CAMPAIGN_VERDICTS)}, not {judgement.verdict!r}")
    if u.db.exec(select(BoardEntry.id).where(BoardEntry.candidate_id == candidate_id)).first() is not None:
        return None
    judgement = still_leads(campaign, cand, judgement)
    parent = None
    if campaign.mode == EVOLUTION_MODE and (m := evolution.link_child(u.db, campaign, cand)) is not None:
        parent = u.db.get(Candidate, m.parent_candidate_id) if m.parent_candidate_id else None
    verdict = BACKUP if campaign.status == FINISHED and judgement.verdict == LEADER else judgement.verdict
    entry = board.post(u.db, campaign, member, cand, report, verdict, parent,
                       note="" if judgement.counted else "the agents' common start again, not counted")
    if campaign.status == FINISHED:
        # Judged after the budget was spent (it was already on the device): on the board for the
        # record, but it neither counts nor leads, so every campaign gets the same budget.
        u.record(session, "board", {"entry_id": entry.id, "number": cand.number, "campaign_verdict": verdict,
                                    "reason": f"{judgement.reason}; after the campaign ended, not counted",
                                    "line": board.entry_line(entry)})
        return entry
    if judgement.counted:
        campaign.evaluations += 1
    u.record(session, "board", {"entry_id": entry.id, "number": cand.number, "campaign_verdict": judgement.verdict,
                                "reason": judgement.reason, "line": board.entry_line(entry),
                                "counted": judgement.counted})
    u.db.add(campaign)
    after_verdict(u, CampaignScope(campaign, member, session), cand, judgement.verdict, report)
    return entry


class CampaignScope:
    """A campaign after a member's verdict (app/domain/verdicts.py): its leader across the
    members, its goal, its budget of evaluations; onward, evolution's next child for this member
    or the plateau's strategy switch."""

    def __init__(self, campaign: Campaign, member: CampaignMember, session: SteeringSession) -> None:
        self.campaign, self.member, self.session = campaign, member, session

    def take_leader(self, u: Unit, cand: Candidate) -> None:
        c = self.campaign
        previous = c.leader_candidate_id
        c.leader_candidate_id, c.leader_session_id = cand.id, self.session.id
        c.leader_speedup, c.last_leader_at = cand.speedup, c.evaluations
        u.db.add(c)
        u.record(self.session, "campaign_leader", {"campaign_id": c.id, "number": cand.number,
                                                   "speedup": cand.speedup, "previous_candidate_id": previous})

    def judged(self, u: Unit, cand: Candidate) -> None:
        return None  # the board entry and its event are recorded before the routine runs

    def goal(self) -> tuple[str, float | None]:
        return self.campaign.goal_metric, self.campaign.goal_target

    def goal_met(self, u: Unit, cand: Candidate, check: goals.GoalCheck) -> None:
        finish(u, self.campaign, f"goal met by {self.member.name} candidate #{cand.number}: {check.reason}")

    def budget_spent(self) -> str | None:
        c = self.campaign
        if c.budget_evaluations is not None and c.evaluations >= c.budget_evaluations:
            return f"the campaign's budget of {c.budget_evaluations} evaluations is spent"
        return None

    def end(self, u: Unit, reason: str) -> None:
        finish(u, self.campaign, reason)

    def onward(self, u: Unit, cand: Candidate) -> None:
        if self.campaign.mode == EVOLUTION_MODE:
            if self.session.status not in FINAL_STATES:
                evolution.next_child(u, self.campaign, self.member)
        elif on_plateau(self.campaign):
            switch_stalled(u, self.campaign)


def finish(u: Unit, campaign: Campaign, reason: str) -> None:
    """The campaign ends: every member still going is stopped (its runner sees it at its next boundary)."""
    campaign.status, campaign.detail = FINISHED, reason
    u.db.add(campaign)
    for m in members_of(u.db, campaign.id or 0):
        s = u.db.get(SteeringSession, m.session_id)
        if s is not None and s.status not in FINAL_STATES:
            try:
                stop(u, m.session_id, "campaign", reason)
            except Conflict:
                continue


def stalled(db: Session, campaign: Campaign, member: CampaignMember) -> bool:
    """No session leader in the member's last few board entries (its share of the window)."""
    n = max(2, campaign.plateau_window // max(1, len(members_of(db, campaign.id or 0))))
    recent = db.exec(select(BoardEntry.verdict).where(BoardEntry.campaign_id == campaign.id,
                                                      BoardEntry.session_id == member.session_id)
                     .order_by(col(BoardEntry.id).desc()).limit(n)).all()
    return len(recent) == n and LEADER not in recent


def untried_strategy(members: list[CampaignMember], offset: int) -> str:
    tried: dict[str, int] = {s: 0 for s in STRATEGIES}
    for m in members:
        for s in m.tried:
            if s in tried:
                tried[s] += 1
    order = list(STRATEGIES[offset % len(STRATEGIES):]) + list(STRATEGIES[:offset % len(STRATEGIES)])
    return min(order, key=lambda s: (tried[s], order.index(s)))


def switch_stalled(u: Unit, campaign: Campaign) -> list[tuple[str, str]]:
    """A campaign plateau: each stalled agent is switched to a strategy nobody has tried (the
    least tried when all were). The window restarts."""
    members = members_of(u.db, campaign.id or 0)
    switched = []
    for i, m in enumerate(members):
        session = u.db.get(SteeringSession, m.session_id)
        if session is None or session.status in FINAL_STATES or not stalled(u.db, campaign, m):
            continue
        strategy = untried_strategy(members, i)
        m.tried = [*m.tried, strategy]
        u.db.add(m)
        text = (f"{SWITCH_PREFIX} {strategy}. The campaign has plateaued ({campaign.plateau_window} evaluations "
                f"without a new campaign leader); the {strategy} layer is the one the agents have tried least.")
        send_message(u, m.session_id, InterventionCreate(text=text, kind="information", author="campaign"))
        u.record(session, "campaign_switch", {"campaign_id": campaign.id, "strategy": strategy,
                                              "window": campaign.plateau_window})
        switched.append((m.name, strategy))
    campaign.last_leader_at = campaign.evaluations
    campaign.detail = ("plateau: switched " + ", ".join(f"{n} to {s}" for n, s in switched)) if switched else \
        "plateau: no agent was stalled"
    u.db.add(campaign)
    return switched
