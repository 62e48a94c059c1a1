"""Read models of a campaign: the leaderboard over agents (with each one's cost and GPU time),
the board, the evolution tree across agents (discarded kernels are ghost nodes), and the pauses
of every member. One call, `campaign_view`, feeds the page, its live fragment and the API.

What the page says is said once here: each agent by one name (its member name) in the
leaderboard, the tree, the board and the pauses; each board entry's effects with what they are
measured against (`compared_with`); the counts and how they relate (`counts`: the campaign's
budget counts judged kernels charged to it, an agent's count every kernel its session judged);
each agent's state as a person reads it (`state`: "finished" once the campaign ended it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, func, select

from app.domain.campaigns.board import entry_dict, nearest_measured
from app.domain.campaigns.members import get_campaign
from app.domain.lifecycle import FINAL_STATES
from app.store.campaign_models import DISCARDED, FINISHED, BoardEntry, Campaign, CampaignMember, Mutation
from app.store.models import (
    DONE,
    EVALUATING,
    FAILED,
    QUEUED,
    STOPPED,
    Candidate,
    Evaluation,
    Event,
    SteeringSession,
    Trigger,
)


@dataclass
class CampaignView:
    campaign: Campaign
    leaderboard: list[dict[str, Any]]
    board: list[dict[str, Any]]
    tree: dict[str, list[dict[str, Any]]]
    pauses: list[dict[str, Any]]
    mutations: list[dict[str, Any]] = field(default_factory=list)
    leader_number: int | None = None  # the campaign leader's number in its session
    leader_agent: str = ""  # the campaign leader's agent (its member name)
    counts: dict[str, Any] = field(default_factory=dict)  # the budget's count and the agents', explained

    def to_dict(self) -> dict[str, Any]:
        c = self.campaign
        return {"id": c.id, "title": c.title, "mode": c.mode, "status": c.status, "detail": c.detail,
                "budget_evaluations": c.budget_evaluations, "evaluations": c.evaluations,
                "goal_metric": c.goal_metric, "goal_target": c.goal_target, "memory_k": c.memory_k,
                "plateau_window": c.plateau_window, "islands": c.islands, "read_only": c.read_only,
                "leader": {"session_id": c.leader_session_id, "candidate_id": c.leader_candidate_id,
                           "speedup": c.leader_speedup, "number": self.leader_number, "agent": self.leader_agent},
                "counts": self.counts,
                "leaderboard": self.leaderboard, "board": self.board, "tree": self.tree, "pauses": self.pauses,
                "mutations": self.mutations}


def list_campaigns(db: Session) -> list[Campaign]:
    return list(db.exec(select(Campaign).order_by(col(Campaign.id).desc())).all())


def gpu_seconds(db: Session, session_id: int) -> float:
    total = db.exec(select(func.sum(Evaluation.seconds)).join(Candidate, col(Candidate.id) == col(
        Evaluation.candidate_id)).where(Candidate.session_id == session_id)).one()
    return round(float(total or 0.0), 1)


def member_state(status: str, campaign: Campaign) -> tuple[str, str]:
    """An agent's state as the leaderboard shows it, and its tone: a member the campaign ended (its
    budget spent, its goal met) or whose agent declared done is "finished", neutral; only a
    failed one is bad; one a person stopped while the campaign went on is "stopped", neutral."""
    if status == FAILED:
        return "failed", "bad"
    if status == DONE or (status == STOPPED and campaign.status == FINISHED):
        return "finished", "neutral"
    if status == STOPPED:
        return "stopped", "neutral"
    return status, status


def board_counts(db: Session, session_ids: list[int]) -> dict[int, dict[str, int]]:
    """Per member, its board entries as the campaign counted them (the `board` events): counted
    against the budget, the agents' common start again (not counted), judged after the campaign
    ended (not counted)."""
    out = {sid: {"counted": 0, "common_start": 0, "after_end": 0} for sid in session_ids}
    if not session_ids:
        return out
    for sid, payload in db.exec(select(Event.session_id, Event.payload).where(
            col(Event.session_id).in_(session_ids), Event.kind == "board")).all():
        if not isinstance(payload, dict):  # an imported trace's payload may be anything
            continue
        reason = str(payload.get("reason", ""))
        if "after the campaign ended" in reason:
            out[sid]["after_end"] += 1
        elif payload.get("counted") is False or ("counted" not in payload and "not counted" in reason):
            out[sid]["common_start"] += 1
        else:
            out[sid]["counted"] += 1
    return out


def counts_legend(c: Campaign, judged: int, common_start: int, after_end: int, unposted: int) -> str:
    """What the numbers on the page count, in words (app/domain/campaigns/hooks.py: `record`)."""
    budget = f" of a budget of {c.budget_evaluations}" if c.budget_evaluations else ""
    parts = [f"The campaign counts {c.evaluations} evaluation{'' if c.evaluations == 1 else 's'}{budget}: "
             "each kernel a member's session judged (leader, backup or rejected) while the campaign ran, once, "
             "whatever its re-times."]
    extra = []
    if common_start:
        extra.append(f"{common_start} repeat{'s' if common_start != 1 else ''} of the agents' common first kernel "
                     "(the same file another agent's first kernel was; paid once, as a solo agent pays for it)")
    if after_end:
        extra.append(f"{after_end} judged after the budget was spent (already on the device; on the board for the "
                     "record, neither counted nor leading)")
    if unposted:
        extra.append(f"{unposted} judged by its session but not posted to the board (its session ended first)")
    if extra:
        parts.append(f"The agents' own counts add up to {judged}: they also count " + "; ".join(extra) + ".")
    else:
        parts.append(f"The agents' own counts add up to the same {judged}.")
    parts.append("A kernel cancelled before its verdict counts nowhere; GPU time includes re-times.")
    return " ".join(parts)


def effect_basis(db: Session, c: Campaign, e: BoardEntry, cand: Candidate | None, chosen: dict[int, int],
                 by_id: dict[int, Candidate], names: dict[int, str]) -> dict[str, Any]:
    """What a board entry's effects are measured against, read back the way `board.post` chose it:
    evolution's parent (the judge's choice), else the candidate's parent in its session, else the
    campaign's nearest measured kernel (posted before it), else nothing: a first kernel's effects
    are its speedups over the baseline."""
    parent: Candidate | None = None
    how = "its parent"
    if cand is not None:
        if cand.id in chosen:
            parent, how = by_id.get(chosen[cand.id]) or db.get(Candidate, chosen[cand.id]), "the parent the judge chose"
        elif cand.parent_id:
            parent = by_id.get(cand.parent_id) or db.get(Candidate, cand.parent_id)
        elif cand.number > 1:  # built on another member's kernel: the one board.post found
            how = "the nearest kernel measured"
            parent = nearest_measured(db, c, cand, before_entry=e.id)
            if parent is None and e.knobs:  # an older trace: today's family renders its kernels differently
                from kernels.attention.family.render import recorded_knobs

                parent = nearest_measured(db, c, cand, before_entry=e.id, setting_of=recorded_knobs)
    if parent is None:
        return {"candidate_id": None, "session_id": None, "number": None, "agent": "", "how": "baseline",
                "label": "over the baseline (a first kernel)"}
    agent = names.get(parent.session_id, f"session {parent.session_id}")
    who = f"#{parent.number}" if parent.session_id == e.session_id else f"{agent} #{parent.number}"
    return {"candidate_id": parent.id, "session_id": parent.session_id, "number": parent.number,
            "agent": names.get(parent.session_id, ""),
            "how": {"its parent": "parent", "the parent the judge chose": "mutation"}.get(how, "board"),
            "label": f"vs its parent {who}" if how == "its parent" else f"vs {who}, {how}"}


def campaign_view(db: Session, campaign_id: int) -> CampaignView:
    c = get_campaign(db, campaign_id)
    members = list(db.exec(select(CampaignMember).where(CampaignMember.campaign_id == campaign_id)
                           .order_by(col(CampaignMember.id))).all())
    sessions = {m.session_id: db.get(SteeringSession, m.session_id) for m in members}
    names = {m.session_id: m.name for m in members}
    entries = list(db.exec(select(BoardEntry).where(BoardEntry.campaign_id == campaign_id)
                           .order_by(col(BoardEntry.id))).all())
    counted = board_counts(db, list(sessions))
    rows: list[dict[str, Any]] = []
    for m in members:
        s = sessions[m.session_id]
        if s is None:
            continue
        mine = [e for e in entries if e.session_id == m.session_id]
        state, tone = member_state(s.status, c)
        rows.append({"name": m.name, "session_id": s.id, "agent": s.agent, "strategy": m.strategy,
                     "tried": m.tried, "island": m.island, "status": s.status, "detail": s.detail,
                     "state": state, "state_tone": tone,
                     "leader_speedup": s.leader_speedup, "evaluations": s.evaluations,
                     "counted": counted[m.session_id]["counted"],
                     "common_start": counted[m.session_id]["common_start"],
                     "after_end": counted[m.session_id]["after_end"],
                     "unposted": max(0, s.evaluations - len(mine)),
                     "campaign_leaders": sum(e.campaign_verdict == "leader" for e in mine),
                     "backups": sum(e.campaign_verdict == "backup" for e in mine),
                     "discarded": sum(e.campaign_verdict == DISCARDED for e in mine),
                     "cost_usd": round(s.used_cost_usd, 4), "tokens": s.used_tokens,
                     "gpu_s": gpu_seconds(db, s.id or 0),
                     "leads_campaign": s.id == c.leader_session_id})
    rows.sort(key=lambda r: (-(r["leader_speedup"] or 0.0), r["session_id"]))
    judged = sum(r["evaluations"] for r in rows)
    totals = {k: sum(r[k] for r in rows) for k in ("counted", "common_start", "after_end", "unposted")}
    counts = {"campaign": c.evaluations, "budget": c.budget_evaluations, "judged": judged, **totals,
              "legend": counts_legend(c, judged, totals["common_start"], totals["after_end"], totals["unposted"])}
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
    cands = list(db.exec(select(Candidate).where(col(Candidate.session_id).in_(list(names)))
                         .order_by(col(Candidate.id))).all())
    by_id = {x.id or 0: x for x in cands}
    chosen = {m.child_candidate_id: m.parent_candidate_id for m in mutations
              if m.child_candidate_id is not None and m.parent_candidate_id is not None}
    posted = [{**entry_dict(e), "at": e.created_at.isoformat(),
               "compared_with": effect_basis(db, c, e, by_id.get(e.candidate_id or 0), chosen, by_id, names)}
              for e in entries]
    built_on = [{"from": p["compared_with"]["candidate_id"], "to": e.candidate_id, "kind": "board"}
                for e, p in zip(entries, posted, strict=True) if p["compared_with"]["how"] == "board"]
    final = {sid for sid, s in sessions.items() if s is not None and s.status in FINAL_STATES}
    return CampaignView(c, rows, list(reversed(posted)),
                        tree(db, c, names, entries, mutations, cands, built_on, final), pauses,
                        [{"id": m.id, "agent": names.get(m.session_id, ""), "island": m.island,
                          "parent_candidate_id": m.parent_candidate_id, "parent_verdict": m.parent_verdict,
                          "question_id": m.question_id, "question": m.question, "reasons": m.reasons,
                          "child_candidate_id": m.child_candidate_id} for m in mutations],
                        leader.number if leader is not None else None,
                        names.get(c.leader_session_id or 0, ""), counts)


def tree(db: Session, c: Campaign, names: dict[int, str], entries: list[BoardEntry],
         mutations: list[Mutation], cands: list[Candidate] | None = None, built_on: list[dict[str, Any]] | None = None,
         final: set[int] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Nodes: every candidate of every member (discarded and rejected ones are ghosts; one its
    session ended before judging is "not judged"), each with its agent's name and where it opens;
    edges: a candidate's parent in its session ("lineage"), evolution's parent -> child across
    agents ("mutation"), and the kernel a candidate submitted without a parent was built on, as
    its board entry read it ("board": another agent's kernel it followed); `agents`: the members
    in order, by name."""
    verdict_of = {e.candidate_id: e.campaign_verdict for e in entries}
    if cands is None:
        cands = list(db.exec(select(Candidate).where(col(Candidate.session_id).in_(list(names)))
                             .order_by(col(Candidate.id))).all())
    final = final or set()
    nodes = [{"id": x.id, "session_id": x.session_id, "agent": names[x.session_id], "number": x.number,
              "title": x.title, "speedup": x.speedup, "verdict": verdict_of.get(x.id, x.verdict or ""),
              "status": "not judged" if x.session_id in final and x.status in (QUEUED, EVALUATING) else x.status,
              "ghost": verdict_of.get(x.id, x.verdict) in (DISCARDED, "rejected"),
              "leader": x.id == c.leader_candidate_id,
              "href": f"/sessions/{x.session_id}/candidates/{x.number}"} for x in cands]
    known = {x.id for x in cands}
    edges = [{"from": x.parent_id, "to": x.id, "kind": "lineage"} for x in cands if x.parent_id in known]
    edges += [{"from": m.parent_candidate_id, "to": m.child_candidate_id, "kind": "mutation", "question": m.question}
              for m in mutations if m.parent_candidate_id in known and m.child_candidate_id in known]
    edges += [e for e in built_on or [] if e["from"] in known and e["to"] in known]
    agents = [{"session_id": sid, "name": name} for sid, name in names.items()]
    return {"nodes": nodes, "edges": edges, "agents": agents}
