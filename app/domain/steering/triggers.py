"""Steering triggers (DESIGN): plateau, declared limit, suspicious win, budget and manual.
Each check is a pure function of the session's numbers; it returns a TriggerHit with a
one-line summary and the evidence a person needs (the window of evaluations, the agent's
words, the flags), or None. Thresholds are per session."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from app.store.models import BUDGET, DECLARED_LIMIT, LEADER, MANUAL, PLATEAU, SUSPICIOUS_WIN


@dataclass(frozen=True)
class Thresholds:
    plateau_window: int = 4  # evaluations without a new leader (or with too little gain)
    plateau_min_gain: float = 0.02  # leader gain over the window below this is a plateau
    suspicious_jump: float = 3.0  # a candidate this many times the leader is suspicious
    min_leader_gain: float = 0.01  # the judge's margin for a new leader
    credit_window: int = 5  # K: evaluations after an intervention that it is credited with
    declared_limit_words: bool = True  # scan the agent's words for "this is the limit" etc.

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Thresholds:
        d = d or {}
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TriggerHit:
    kind: str
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluationPoint:
    """One evaluated candidate as the triggers see it."""

    number: int
    verdict: str
    speedup: float | None  # geomean vs baseline on all scenarios (None when it failed)
    leader_after: float | None  # the leader's speedup once this verdict was in

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_plateau(points: list[EvaluationPoint], leader_before: float | None,
                  t: Thresholds) -> TriggerHit | None:
    """`points`: evaluations since steering last resumed, oldest first. Fires when the last
    `plateau_window` of them brought no new leader, or a leader gain below the threshold."""
    n = t.plateau_window
    if n <= 0 or len(points) < n:
        return None
    window = points[-n:]
    start = points[-n - 1].leader_after if len(points) > n else leader_before
    start_value = start if start is not None else 1.0
    end_value = window[-1].leader_after if window[-1].leader_after is not None else start_value
    gain = end_value / start_value - 1.0
    new_leaders = [p.number for p in window if p.verdict == LEADER]
    if new_leaders and gain >= t.plateau_min_gain:
        return None
    if new_leaders:
        why = f"the leader gained only {gain * 100:.1f}% over the last {n} evaluations " \
              f"(threshold {t.plateau_min_gain * 100:.1f}%)"
    else:
        why = f"no new leader in the last {n} evaluations"
    return TriggerHit(PLATEAU, f"Plateau: {why}", {
        "window": [p.to_dict() for p in window],
        "leader_gain": gain,
        "leader_speedup": end_value,
        "threshold_window": n,
        "threshold_min_gain": t.plateau_min_gain,
    })


# Phrases with which agents declare a limit or that they are done (case-insensitive).
LIMIT_PATTERNS = [
    r"\bthis is the limit\b", r"\b(?:hardware|theoretical|fundamental|physical) limit\b",
    r"\bcan(?:not|'t) (?:be )?(?:go|get|made|make it) (?:any )?faster\b",
    r"\bcannot be (?:improved|optimi[sz]ed) (?:further|any more)\b",
    r"\bno further (?:improvement|optimi[sz]ation)s? (?:is|are)? ?possible\b",
    r"\b(?:already|is) (?:optimal|at (?:peak|the roofline))\b",
    r"\bI am done\b", r"\bI'm done\b", r"\bwe are done\b", r"\bnothing (?:more|left) to (?:try|optimi[sz]e)\b",
    r"\bno further ideas\b",
]
_LIMIT_RE = re.compile("|".join(f"(?:{p})" for p in LIMIT_PATTERNS), re.IGNORECASE)


def check_declared_limit(text: str, t: Thresholds) -> TriggerHit | None:
    if not t.declared_limit_words or not text:
        return None
    m = _LIMIT_RE.search(text)
    if m is None:
        return None
    return TriggerHit(DECLARED_LIMIT, f"The agent declared a limit: \u201c{m.group(0)}\u201d", {
        "phrase": m.group(0), "words": text[:2000], "source": "agent text",
    })


def declared_done(reason: str) -> TriggerHit:
    return TriggerHit(DECLARED_LIMIT, "The agent called declare_done", {
        "words": reason[:2000], "source": "declare_done tool call",
    })


def ended_turn(text: str) -> TriggerHit:
    return TriggerHit(DECLARED_LIMIT, "The agent ended its turn with nothing more to try", {
        "words": text[:2000], "source": "end of turn without a tool call",
    })


def check_suspicious_win(number: int, speedup: float | None, leader_speedup: float | None,
                         flags: list[str], t: Thresholds, correct: bool = True) -> TriggerHit | None:
    """A sanity flag, or a jump of a correct candidate over the leader (or the baseline)
    above the threshold. (A failing kernel's speed on the scenarios it passed is no win.)"""
    reference = leader_speedup if leader_speedup is not None else 1.0
    jump = speedup / reference if speedup is not None and reference > 0 else None
    if flags:
        return TriggerHit(SUSPICIOUS_WIN, f"Suspicious win: candidate #{number} has sanity flags", {
            "candidate": number, "flags": flags[:20], "speedup": speedup, "leader_speedup": leader_speedup,
            "jump": jump,
        })
    if correct and jump is not None and jump >= t.suspicious_jump:
        return TriggerHit(SUSPICIOUS_WIN,
                          f"Suspicious win: candidate #{number} is {jump:.2f}x the leader "
                          f"(threshold {t.suspicious_jump:g}x)", {
                              "candidate": number, "flags": [], "speedup": speedup,
                              "leader_speedup": leader_speedup, "jump": jump,
                              "threshold": t.suspicious_jump,
                          })
    return None


@dataclass(frozen=True)
class BudgetUse:
    steps: int
    tokens: int
    cost_usd: float
    seconds: float


@dataclass(frozen=True)
class Budget:
    steps: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    seconds: float | None = None


def check_budget(used: BudgetUse, budget: Budget) -> TriggerHit | None:
    """Budgets pause and ask; they never fail a session."""
    for name, have, limit, unit in (
        ("steps", used.steps, budget.steps, "agent steps"),
        ("tokens", used.tokens, budget.tokens, "tokens"),
        ("cost_usd", used.cost_usd, budget.cost_usd, "USD"),
        ("seconds", used.seconds, budget.seconds, "seconds"),
    ):
        if limit is not None and have >= limit:
            return TriggerHit(BUDGET, f"Budget reached: {have:g} of {limit:g} {unit}", {
                "budget": name, "used": have, "limit": limit,
            })
    return None


def manual(author: str, reason: str = "") -> TriggerHit:
    return TriggerHit(MANUAL, f"Paused by {author}" + (f": {reason}" if reason else ""), {
        "author": author, "reason": reason,
    })
