"""Ranking the bank for a pause: which questions to show (or auto-ask) first.

A question's score adds up, each part with its reason shown to the person:
  trigger fit   questions written for this kind of pause first (the first trigger a question
                lists is the one it was written for), other fitting ones next, `any` after;
  novelty       layers the session has not explored yet (a question that moves the agent to
                another layer is what preceded every large gain);
  evidence      the leader gain that followed the question before, shrunk toward zero for
                questions with few uses, plus a small bonus for questions rarely tried (so that
                the bank keeps learning, and one that repeatedly led nowhere sinks);
  kind          information ranks below questions (gains followed questions, not information);
  repeats       what was just asked is left out; what was asked earlier in the session is lowered;
  diagnosis     a question written for what the leader's profile found (question_bank/situations.py:
                Hopper without HGMMA -> the warpgroup MMA question) first, the top finding's most.
Then the list is re-ordered greedily so the first few do not all name the same layer. A question
that presumes what the session does not have yet (N evaluations, a leader, the leader's profile:
question_bank/needs.py) is left out when the caller says what the session has."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlmodel import Session

from question_bank.evidence import NO_EVIDENCE, EvidenceStats, question_evidence, uses_of_session
from question_bank.models import PAUSE_TRIGGERS, BankQuestion, Kind, Status, Trigger, normalize_text
from question_bank.needs import SessionState, needs_of
from question_bank.situations import matched_keys
from question_bank.store import list_questions


@dataclass(frozen=True)
class RankingWeights:
    trigger_written_for: float = 3.0   # the question's first trigger
    trigger_match: float = 2.5         # listed among its triggers
    trigger_any: float = 1.5
    manual_pause: float = 1.0     # a person's pause has no trigger: every question fits a little
    novelty: float = 1.5          # for a question whose layers the session has not explored
    evidence: float = 12.0        # per unit of shrunk mean log gain (+10% over many uses ~ +1.1)
    evidence_cap: float = 2.0
    untried: float = 0.5          # exploration bonus, divided by sqrt(1 + credited uses)
    information: float = -0.75
    asked_earlier: float = -1.0
    same_layer_as_above: float = -0.4   # per layer shared with questions already ranked above
    diagnosis: float = 4.0        # written for the profile's top finding; x0.75 per rank below it


@dataclass(frozen=True)
class PauseSituation:
    """What the ranking knows about a pause."""

    trigger: str
    problem: str | None = None
    arch: str | None = None
    explored_layers: Mapping[str, int] = field(default_factory=dict)  # layer -> times explored
    recent_question_ids: frozenset[int] = frozenset()   # just asked: left out
    recent_texts: frozenset[str] = frozenset()           # normalized texts just sent: left out
    asked_question_ids: frozenset[int] = frozenset()    # asked at any time in the session
    findings: tuple[str, ...] = ()   # the leader's profile's finding codes, most at stake first
    state: SessionState | None = None  # what the session has (None: unknown, nothing left out for it)

    def __post_init__(self) -> None:
        if self.trigger not in PAUSE_TRIGGERS:
            raise ValueError(f"trigger must be one of {', '.join(PAUSE_TRIGGERS)}, got {self.trigger!r}")


@dataclass(frozen=True)
class RankedQuestion:
    question: BankQuestion
    score: float
    reasons: tuple[str, ...]
    evidence: EvidenceStats

    def to_dict(self) -> dict[str, object]:
        return {**self.question.to_dict(), "score": round(self.score, 4), "reasons": list(self.reasons),
                "evidence": self.evidence.to_dict()}


def _label(trigger: str) -> str:
    return trigger.replace("_", " ")


def score_question(
    q: BankQuestion, situation: PauseSituation, evidence: EvidenceStats, weights: RankingWeights
) -> tuple[float, list[str]]:
    score = 0.0
    reasons: list[str] = []
    if situation.trigger == "manual":
        score += weights.manual_pause
    elif q.triggers and q.triggers[0] == situation.trigger:
        score += weights.trigger_written_for
        reasons.append(f"written for a {_label(situation.trigger)}")
    elif situation.trigger in q.triggers:
        score += weights.trigger_match
        reasons.append(f"suits a {_label(situation.trigger)}")
    elif Trigger.ANY.value in q.triggers:
        score += weights.trigger_any
        reasons.append("suits any pause")

    if q.layers:
        fresh = [layer for layer in q.layers if situation.explored_layers.get(layer, 0) == 0]
        novelty = sum(1.0 / (1 + situation.explored_layers.get(layer, 0)) for layer in q.layers) / len(q.layers)
        score += weights.novelty * novelty
        if fresh:
            reasons.append(f"{', '.join(_label(x) for x in fresh)} not explored in this session")
        else:
            reasons.append(f"{', '.join(_label(x) for x in q.layers)} already explored")

    score += weights.untried / math.sqrt(1 + evidence.credited)
    if evidence.credited:
        part = max(-weights.evidence_cap, min(weights.evidence_cap, weights.evidence * evidence.shrunk_log_gain))
        score += part
        reasons.append(f"leader {evidence.geomean_gain:.3f}x after it ({evidence.credited} "
                       f"use{'s' if evidence.credited != 1 else ''})")

    matched = matched_keys(situation.findings).get(q.key)
    if matched is not None:
        rank_of, code = matched
        score += weights.diagnosis * 0.75 ** rank_of
        reasons.append(f"matches the profile: {code.replace('_', ' ')}")

    if q.kind == Kind.INFORMATION.value:
        score += weights.information
        reasons.append("information, not a question")
    if q.id is not None and q.id in situation.asked_question_ids:
        score += weights.asked_earlier
        reasons.append("asked earlier in this session")
    return score, reasons


def rank(
    questions: Iterable[BankQuestion],
    situation: PauseSituation,
    evidence: Mapping[int, EvidenceStats] | None = None,
    *,
    limit: int | None = None,
    weights: RankingWeights | None = None,
) -> list[RankedQuestion]:
    """Rank active, in-scope questions for a pause, best first."""
    weights = weights or RankingWeights()
    evidence = evidence or {}
    scored: list[tuple[float, int, BankQuestion, list[str], EvidenceStats]] = []
    for q in questions:
        if q.status != Status.ACTIVE.value or not q.in_scope(situation.problem, situation.arch):
            continue
        if (q.id is not None and q.id in situation.recent_question_ids) or \
                normalize_text(q.text) in situation.recent_texts:
            continue
        if situation.state is not None and needs_of(q.text).unmet(situation.state) is not None:
            continue  # "your last ten candidates" before ten evaluations: not yet
        ev = evidence.get(q.id, NO_EVIDENCE) if q.id is not None else NO_EVIDENCE
        score, reasons = score_question(q, situation, ev, weights)
        scored.append((score, q.id or 0, q, reasons, ev))

    # Greedy diversity: take the best, then lower the rest by the layers already shown above.
    remaining = sorted(scored, key=lambda t: (-t[0], t[1]))
    ranked: list[RankedQuestion] = []
    shown: Counter[str] = Counter()
    while remaining and (limit is None or len(ranked) < limit):
        best_i, best_score = 0, float("-inf")
        for i, (score, _qid, q, _r, _e) in enumerate(remaining):
            adjusted = score + weights.same_layer_as_above * sum(1 for layer in q.layers if shown[layer])
            if adjusted > best_score + 1e-12:
                best_i, best_score = i, adjusted
        _score, _qid, q, reasons, ev = remaining.pop(best_i)
        ranked.append(RankedQuestion(q, best_score, tuple(reasons), ev))
        shown.update(q.layers)
    return ranked


def situation_for_session(
    session: Session,
    session_ref: str | int,
    trigger: str,
    *,
    problem: str | None = None,
    arch: str | None = None,
    extra_layers: Mapping[str, int] | None = None,
    recent: int = 3,
    findings: Sequence[str] = (),
    state: SessionState | None = None,
) -> PauseSituation:
    """A pause's situation from what the bank recorded for this session: the layers its messages
    named (plus `extra_layers`, e.g. the layers an agent's candidates changed) and what was sent."""
    uses = uses_of_session(session, session_ref)
    explored: Counter[str] = Counter()
    for use in uses:
        explored.update(use.layers)
    if extra_layers:
        explored.update(dict(extra_layers))
    last = uses[-recent:] if recent > 0 else []
    return PauseSituation(
        trigger=trigger,
        problem=problem,
        arch=arch,
        explored_layers=dict(explored),
        recent_question_ids=frozenset(u.question_id for u in last if u.question_id is not None),
        recent_texts=frozenset(normalize_text(u.text) for u in last),
        asked_question_ids=frozenset(u.question_id for u in uses if u.question_id is not None),
        findings=tuple(findings),
        state=state,
    )


def rank_for_pause(
    session: Session,
    session_ref: str | int,
    trigger: str,
    *,
    problem: str | None = None,
    arch: str | None = None,
    extra_layers: Mapping[str, int] | None = None,
    limit: int = 5,
    findings: Sequence[str] = (),
    state: SessionState | None = None,
) -> list[RankedQuestion]:
    """The questions to suggest when a session pauses, best first (with `state`, only those that
    fit what the session has)."""
    situation = situation_for_session(session, session_ref, trigger, problem=problem, arch=arch,
                                      extra_layers=extra_layers, findings=findings, state=state)
    return rank(list_questions(session, status=Status.ACTIVE.value), situation,
                question_evidence(session), limit=limit)

