"""The campaign judge, over the candidates of every member: a failure is discarded; a correct
kernel not faster than the campaign leader goes to the backup pool; a faster one is re-timed
interleaved against the campaign leader (the pipeline's re-time) and leads the campaign only
if it still wins. A member's first kernel that is byte for byte another member's first kernel
(the agents' common start) is a backup that the budget does not count: a campaign of N agents
pays for its start once, as a single agent does. And the campaign plateau: the last
`plateau_window` campaign evaluations brought no new campaign leader."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session, col, select

from app.domain.steering.session_judge import CONTENDER, Judgement, confirm
from app.store.campaign_models import BACKUP, DISCARDED, LEADER, BoardEntry, Campaign
from app.store.models import REJECTED, Candidate
from harness.report import EvaluationReport


@dataclass(frozen=True)
class CampaignJudgement:
    verdict: str  # discarded | backup | leader, or "contender" until re-timed
    reason: str
    retime_against: Candidate | None = None  # the campaign leader to re-time against
    counted: bool = True  # False: the common start again, not charged against the campaign's budget


def first_verdict(db: Session, campaign: Campaign, cand: Candidate, session_retimed_against: int | None) -> \
        CampaignJudgement:
    """The verdict before any campaign re-time. `session_retimed_against` is the candidate the
    session's own judge re-timed this one against (its previous session leader), if any."""
    if cand.verdict == REJECTED or cand.speedup is None or cand.passed < cand.scenario_count:
        return CampaignJudgement(DISCARDED, f"discarded: {cand.verdict_reason or 'not correct'}")
    same = common_start(db, campaign, cand)
    if same is not None:
        return CampaignJudgement(BACKUP, f"the agents' common start: the same kernel as {same.author}'s #1, on the "
                                         f"board already; {cand.speedup:.3f}x, a backup, not counted against the "
                                         "campaign's budget", counted=False)
    if campaign.leader_candidate_id is None or campaign.leader_speedup is None:
        return CampaignJudgement(LEADER, f"the campaign's first correct kernel: {cand.speedup:.3f}x")
    target = lead_target(campaign, campaign.leader_speedup)
    if cand.speedup <= target:
        return CampaignJudgement(BACKUP, f"correct but not faster than the campaign leader: {cand.speedup:.3f}x vs "
                                         f"{campaign.leader_speedup:.3f}x (needs > {target:.3f}x)")
    if cand.id == campaign.leader_candidate_id:
        return CampaignJudgement(LEADER, "already the campaign leader")
    if session_retimed_against == campaign.leader_candidate_id:
        # Its session's judge just re-timed it against this very kernel: that re-time decides,
        # both ways (a second re-time would only give the contender a second draw of the noise).
        if cand.verdict == LEADER:
            return CampaignJudgement(LEADER, f"{cand.speedup:.3f}x; already re-timed interleaved against the "
                                             "campaign leader by its session's judge")
        return CampaignJudgement(BACKUP, f"{cand.speedup:.3f}x in its own run; its session's judge re-timed it "
                                         f"against the campaign leader: {cand.verdict_reason or 'not faster'}")
    leader = db.get(Candidate, campaign.leader_candidate_id)
    if leader is None:
        return CampaignJudgement(LEADER, f"{cand.speedup:.3f}x; the previous campaign leader is gone")
    return CampaignJudgement(CONTENDER, f"{cand.speedup:.3f}x vs the campaign leader's "
                                        f"{campaign.leader_speedup:.3f}x; re-timing against it", leader)


def common_start(db: Session, campaign: Campaign, cand: Candidate) -> BoardEntry | None:
    """The board entry of another member's first kernel, when `cand` is a member's first kernel
    with the same source (the offline agents all begin from one port). Only first kernels: a
    later repeat is the agent's own choice and costs the budget like any evaluation. Only a
    copy that was judged correct (leader or backup) and only once the campaign has a leader: a
    start discarded by a transient failure does not cost its correct twin the lead."""
    if cand.number != 1 or campaign.leader_candidate_id is None:
        return None
    for entry, source in db.exec(select(BoardEntry, Candidate.source)
                                 .join(Candidate, col(Candidate.id) == col(BoardEntry.candidate_id))
                                 .where(BoardEntry.campaign_id == campaign.id, BoardEntry.candidate_number == 1,
                                        BoardEntry.session_id != cand.session_id,
                                        col(BoardEntry.campaign_verdict).in_((LEADER, BACKUP)))
                                 .order_by(col(BoardEntry.id))):
        if source == cand.source:
            return entry
    return None


def lead_target(campaign: Campaign, leader_speedup: float) -> float:
    """The speedup a kernel must pass to lead the campaign: the leader's, plus the judge's margin."""
    return leader_speedup * (1.0 + campaign.min_leader_gain)


def still_leads(campaign: Campaign, cand: Candidate, judgement: CampaignJudgement) -> CampaignJudgement:
    """A verdict reached against the campaign leader of its first look: another member's kernel
    may have taken the lead while this one was re-timed (members are judged concurrently). Then
    it leads only if it also beats the leader of now; otherwise it joins the backups."""
    if (judgement.verdict != LEADER or campaign.leader_candidate_id in (None, cand.id)
            or campaign.leader_speedup is None or cand.speedup is None):
        return judgement
    target = lead_target(campaign, campaign.leader_speedup)
    if cand.speedup > target:
        return judgement
    return CampaignJudgement(BACKUP, f"{judgement.reason}; but while it was judged another agent's kernel took "
                                     f"the campaign lead at {campaign.leader_speedup:.3f}x (needs > {target:.3f}x)")


def after_retime(first: CampaignJudgement, cand: Candidate, retime: EvaluationReport,
                 leader_own: EvaluationReport | None = None) -> CampaignJudgement:
    """The final verdict of a contender from its interleaved re-time against the campaign leader
    (`leader_own`: the campaign leader's own suite evaluation, as for the session's judge)."""
    final = confirm(retime, Judgement(CONTENDER, first.reason, cand.speedup, needs_retime=True),
                    leader_own=leader_own)
    verdict = {LEADER: LEADER, REJECTED: DISCARDED}.get(final.verdict, BACKUP)
    return CampaignJudgement(verdict, final.reason.replace("previous leader", "campaign leader")
                             .replace("the leader", "the campaign leader"))


def on_plateau(campaign: Campaign) -> bool:
    return campaign.evaluations - campaign.last_leader_at >= campaign.plateau_window
