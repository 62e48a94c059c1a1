"""Evolution mode: the members are a population on islands. After each judged child the judge
chooses the next parent for that member's island (the island's best leader or backup that has
not had its share of children; every `MIGRATE_EVERY`-th child takes the campaign leader from any
island), and the agent is given one mutation instruction phrased as a question, drawn from the
question bank by its evidence for the situation: the trigger (a plateau: the parent is the
best so far and the island needs a new idea), the layers the island already explored, and the
parent's weakest scenario category. The question is recorded as a bank use of that question,
so credit flows back to it as for any question (question_bank/evidence.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from app.domain.campaigns.board import category_speedups, knobs_of_source
from app.domain.schemas import InterventionCreate
from app.domain.sessions import send_message, suite_report
from app.store.campaign_models import BACKUP, LEADER, BoardEntry, Campaign, CampaignMember, Mutation
from app.store.events import Unit
from app.store.models import Candidate, SteeringSession
from question_bank.evidence import DEFAULT_WINDOW, record_use
from question_bank.models import Author
from question_bank.ranking import RankedQuestion, rank_for_pause

MIGRATE_EVERY = 4  # every 4th child of the campaign takes the campaign leader as its parent
MAX_CHILDREN = 3  # a parent gets at most this many children before the next one is chosen
TRIGGER = "plateau"  # a child is asked for when the parent has stopped improving by itself
# The kernel family's layers (what the board records) in the bank's vocabulary.
FAMILY_TO_BANK = {"tiling": ("tensor_cores",), "memory": ("memory", "pipeline"),
                  "math": ("tensor_cores", "precision"), "scheduling": ("scheduling",), "masking": ("masking",)}
# Where a weak scenario category's time usually goes (the bank's layers).
CATEGORY_TO_BANK = {"decode": "scheduling", "chunked": "scheduling", "gqa": "masking", "ragged": "masking",
                    "prefill": "pipeline"}


@dataclass(frozen=True)
class Parent:
    candidate: Candidate
    verdict: str  # leader | backup
    why: str


def island_of(db: Session, campaign_id: int, island: int) -> list[int]:
    return list(db.exec(select(CampaignMember.session_id).where(
        CampaignMember.campaign_id == campaign_id, CampaignMember.island == island)).all())


def choose_parent(db: Session, campaign: Campaign, island: int) -> Parent | None:
    """The judge's choice: leaders and backups only (never a discarded kernel)."""
    children = db.exec(select(Mutation).where(Mutation.campaign_id == campaign.id)).all()
    used: dict[int, int] = {}
    for m in children:
        if m.parent_candidate_id is not None:
            used[m.parent_candidate_id] = used.get(m.parent_candidate_id, 0) + 1
    if campaign.leader_candidate_id is not None and (len(children) + 1) % MIGRATE_EVERY == 0:
        leader = db.get(Candidate, campaign.leader_candidate_id)
        if leader is not None:
            return Parent(leader, LEADER, "migration: the campaign leader, from any island")
    sessions = island_of(db, campaign.id or 0, island)
    entries = db.exec(select(BoardEntry).where(BoardEntry.campaign_id == campaign.id,
                                               col(BoardEntry.session_id).in_(sessions),
                                               col(BoardEntry.campaign_verdict).in_([LEADER, BACKUP]))).all()
    pool = sorted(entries, key=lambda e: (-(e.speedup or 0.0), e.id or 0))
    for e in pool:
        if e.candidate_id is not None and used.get(e.candidate_id, 0) < MAX_CHILDREN:
            cand = db.get(Candidate, e.candidate_id)
            if cand is not None:
                kind = "the island's best" if e is pool[0] else "a backup of the island"
                return Parent(cand, e.campaign_verdict, f"{kind} ({e.speedup or 0:.3f}x, {e.campaign_verdict})")
    return None


def explored_layers(db: Session, campaign_id: int, sessions: list[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in db.exec(select(BoardEntry.layer).where(BoardEntry.campaign_id == campaign_id,
                                                        col(BoardEntry.session_id).in_(sessions))).all():
        for part in layer.split(","):
            for bank_layer in FAMILY_TO_BANK.get(part, ()):
                out[bank_layer] = out.get(bank_layer, 0) + 1
    return out


def weakest_category(db: Session, campaign: Campaign, parent: Candidate) -> str | None:
    """The parent's category furthest behind the campaign leader (or, if it leads, its slowest)."""
    mine = category_speedups(r) if (r := suite_report(db, parent.id)) else {}
    if not mine:
        return None
    best = category_speedups(r) if (r := suite_report(db, campaign.leader_candidate_id)) else {}
    return min(mine, key=lambda cat: (mine[cat] / best.get(cat, 1.0) if best and parent.id !=
                                      campaign.leader_candidate_id else mine[cat], cat))


def draw_question(db: Session, campaign: Campaign, session: SteeringSession, island: int,
                  weak: str | None) -> tuple[RankedQuestion | None, list[str]]:
    """The bank's best question for this situation; one aimed at the weak category's layer wins."""
    sessions = island_of(db, campaign.id or 0, island)
    ranked = rank_for_pause(db, session.id or 0, TRIGGER, problem=session.problem,
                            extra_layers=explored_layers(db, campaign.id or 0, sessions), limit=8)
    ranked = [r for r in ranked if r.question.kind == "question"]  # an instruction phrased as a question
    if not ranked:
        return None, []
    want = CATEGORY_TO_BANK.get(weak or "")
    chosen = next((r for r in ranked if want in r.question.layers), ranked[0]) if want else ranked[0]
    reasons = list(chosen.reasons)
    if want and want in chosen.question.layers:
        reasons.append(f"aims at {want}, where the weakest category ({weak}) loses time")
    return chosen, reasons


def instruction(question: str, parent: Candidate) -> str:
    """The question, then the parent to start from (the kernel family's knobs when it has them)."""
    knobs = knobs_of_source(parent.source)
    where = f"session {parent.session_id} candidate #{parent.number}"
    tail = f"; knobs {json.dumps(knobs, separators=(',', ':'))}" if knobs else ""
    return f"{question}\n\nParent: {where}{tail}"


def link_child(db: Session, campaign: Campaign, cand: Candidate) -> Mutation | None:
    """The open mutation this candidate answers (the session's latest without a child)."""
    m = db.exec(select(Mutation).where(Mutation.campaign_id == campaign.id, Mutation.session_id == cand.session_id,
                                       col(Mutation.child_candidate_id).is_(None))
                .order_by(col(Mutation.id).desc())).first()
    if m is None or (m.created_at and cand.created_at and _naive(cand.created_at) < _naive(m.created_at)):
        return None
    m.child_candidate_id = cand.id
    db.add(m)
    return m


def _naive(t: Any) -> Any:
    return t.replace(tzinfo=None)


def next_child(u: Unit, campaign: Campaign, member: CampaignMember) -> Mutation | None:
    """Order the member's next child: a parent, one bank question, a message to its agent."""
    session = u.db.get(SteeringSession, member.session_id)
    if session is None or session.read_only:
        return None
    parent = choose_parent(u.db, campaign, member.island)
    if parent is None:
        return None
    weak = weakest_category(u.db, campaign, parent.candidate)
    ranked, reasons = draw_question(u.db, campaign, session, member.island, weak)
    if ranked is None:
        return None
    text = instruction(ranked.question.text, parent.candidate)
    item = send_message(u, member.session_id, InterventionCreate(text=text, kind="question", author="bank"))
    record_use(u.db, session_ref=member.session_id, text=ranked.question.text, kind=ranked.question.kind,
               author=Author.BANK.value, eval_index=session.evaluations, leader=session.leader_speedup,
               question_id=ranked.question.id, intervention_ref=item.id, trigger=TRIGGER,
               window=DEFAULT_WINDOW, commit=False)
    m = Mutation(campaign_id=campaign.id or 0, session_id=member.session_id, island=member.island,
                 parent_candidate_id=parent.candidate.id, parent_verdict=parent.verdict,
                 question_id=ranked.question.id, question=ranked.question.text,
                 reasons=[parent.why, *reasons], intervention_id=item.id)
    u.db.add(m)
    u.db.flush()
    u.record(session, "mutation", {"mutation_id": m.id, "parent": f"session {parent.candidate.session_id} "
                                   f"#{parent.candidate.number}", "parent_verdict": parent.verdict,
                                   "question_id": ranked.question.id, "question": ranked.question.text,
                                   "reasons": m.reasons})
    return m
