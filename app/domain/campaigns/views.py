"""Read models of a campaign: the leaderboard over agents (with each one's cost and GPU time),
the board, the evolution tree across agents (discarded kernels are ghost nodes), and the pauses
of every member. One call, `campaign_view`, feeds the page, its live fragment and the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, func, select

from app.domain.campaigns.board import entry_dict
from app.domain.campaigns.members import get_campaign
from app.store.campaign_models import DISCARDED, BoardEntry, Campaign, CampaignMember, Mutation
from app.store.models import Candidate, Evaluation, SteeringSession, Trigger


@dataclass
class CampaignView:
    campaign: Campaign
    leaderboard: list[dict[str, Any]]
    board: list[dict[str, Any]]
    tree: dict[str, list[dict[str, Any]]]
    pauses: list[dict[str, Any]]
    mutations: list[dict[str, Any]] = field(default_factory=list)
    leader_number: int | None = None  # the campaign leader's number in its session

    def to_dict(self) -> dict[str, Any]:
        c = self.campaign
        return {"id": c.id, "title": c.title, "mode": c.mode, "status": c.status, "detail": c.detail,
                "budget_evaluations": c.budget_evaluations, "evaluations": c.evaluations,
                "goal_metric": c.goal_metric, "goal_target": c.goal_target, "memory_k": c.memory_k,
                "plateau_window": c.plateau_window, "islands": c.islands, "read_only": c.read_only,
                "leader": {"session_id": c.leader_session_id, "candidate_id": c.leader_candidate_id,
                           "speedup": c.leader_speedup, "number": self.leader_number},
                "leaderboard": self.leaderboard, "board": self.board, "tree": self.tree, "pauses": self.pauses,
                "mutations": self.mutations}


def list_campaigns(db: Session) -> list[Campaign]:
    return list(db.exec(select(Campaign).order_by(col(Campaign.id).desc())).all())


def gpu_seconds(db: Session, session_id: int) -> float:
    total = db.exec(select(func.sum(Evaluation.seconds)).join(Candidate, col(Candidate.id) == col(
        Evaluation.candidate_id)).where(Candidate.session_id == session_id)).one()
    return round(float(total or 0.0), 1)


def campaign_view(db: Session, campaign_id: int) -> CampaignView:
    c = get_campaign(db, campaign_id)
    members = list(db.exec(select(CampaignMember).where(CampaignMember.campaign_id == campaign_id)
                           .order_by(col(CampaignMember.id))).all())
    sessions = {m.session_id: db.get(SteeringSession, m.session_id) for m in members}
    names = {m.session_id: m.name for m in members}
    entries = list(db.exec(select(BoardEntry).where(BoardEntry.campaign_id == campaign_id)
                           .order_by(col(BoardEntry.id))).all())
    rows: list[dict[str, Any]] = []
    for m in members:
        s = sessions[m.session_id]
        if s is None:
            continue
        mine = [e for e in entries if e.session_id == m.session_id]
        rows.append({"name": m.name, "session_id": s.id, "agent": s.agent, "strategy": m.strategy,
                     "tried": m.tried, "island": m.island, "status": s.status, "detail": s.detail,
                     "leader_speedup": s.leader_speedup, "evaluations": s.evaluations,
                     "campaign_leaders": sum(e.campaign_verdict == "leader" for e in mine),
                     "backups": sum(e.campaign_verdict == "backup" for e in mine),
                     "discarded": sum(e.campaign_verdict == DISCARDED for e in mine),
                     "cost_usd": round(s.used_cost_usd, 4), "tokens": s.used_tokens,
                     "gpu_s": gpu_seconds(db, s.id or 0),
                     "leads_campaign": s.id == c.leader_session_id})
    rows.sort(key=lambda r: (-(r["leader_speedup"] or 0.0), r["session_id"]))
    mutations = list(db.exec(select(Mutation).where(Mutation.campaign_id == campaign_id)
                             .order_by(col(Mutation.id))).all())
    pauses: list[dict[str, Any]] = []
    for sid in sessions:
        for t in db.exec(select(Trigger).where(Trigger.session_id == sid)).all():
            pauses.append({"agent": names[sid], "session_id": sid, "kind": t.kind, "summary": t.summary,
                           "at": t.created_at.isoformat(), "resolved": t.resolved_at is not None,
                           "resolution": t.resolution})
    pauses.sort(key=lambda p: str(p["at"]))
    leader = db.get(Candidate, c.leader_candidate_id) if c.leader_candidate_id else None
    return CampaignView(c, rows, [{**entry_dict(e), "at": e.created_at.isoformat()} for e in reversed(entries)],
                        tree(db, c, names, entries, mutations), pauses,
                        [{"id": m.id, "agent": names.get(m.session_id, ""), "island": m.island,
                          "parent_candidate_id": m.parent_candidate_id, "parent_verdict": m.parent_verdict,
                          "question_id": m.question_id, "question": m.question, "reasons": m.reasons,
                          "child_candidate_id": m.child_candidate_id} for m in mutations],
                        leader.number if leader is not None else None)


def tree(db: Session, c: Campaign, names: dict[int, str], entries: list[BoardEntry],
         mutations: list[Mutation]) -> dict[str, list[dict[str, Any]]]:
    """Nodes: every judged candidate of every member (discarded ones are ghosts); edges: a
    candidate's parent in its session, and evolution's parent -> child across agents."""
    verdict_of = {e.candidate_id: e.campaign_verdict for e in entries}
    cands = list(db.exec(select(Candidate).where(col(Candidate.session_id).in_(list(names)))
                         .order_by(col(Candidate.id))).all())
    nodes = [{"id": x.id, "session_id": x.session_id, "agent": names[x.session_id], "number": x.number,
              "title": x.title, "speedup": x.speedup, "verdict": verdict_of.get(x.id, x.verdict or ""),
              "ghost": verdict_of.get(x.id, x.verdict) in (DISCARDED, "rejected"),
              "leader": x.id == c.leader_candidate_id} for x in cands]
    known = {x.id for x in cands}
    edges = [{"from": x.parent_id, "to": x.id, "kind": "lineage"} for x in cands if x.parent_id in known]
    edges += [{"from": m.parent_candidate_id, "to": m.child_candidate_id, "kind": "mutation", "question": m.question}
              for m in mutations if m.parent_candidate_id in known and m.child_candidate_id in known]
    return {"nodes": nodes, "edges": edges}
