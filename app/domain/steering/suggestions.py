"""Questions suggested in the pause banner. The question bank (question_bank/) ranks its own
questions by evidence; until it registers a provider with `set_provider`, the server offers
these starter questions, one set per trigger kind, phrased to move the agent to another
layer of the problem (DESIGN: every large gain followed such a question)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from app.domain.profiles import leader_profile
from app.store.models import BUDGET, DECLARED_LIMIT, MANUAL, PLATEAU, SUSPICIOUS_WIN, SteeringSession
from question_bank.needs import SessionState, needs_of


@dataclass(frozen=True)
class Suggestion:
    text: str
    kind: str = "question"  # question | information
    source: str = "starter"  # where it came from (the bank names its question id)


STARTER_QUESTIONS: dict[str, list[str]] = {
    PLATEAU: [
        "Your last variants all tune the same loop. Which layer have you not touched yet: "
        "tiling, the memory pipeline, the math units, scheduling, or masking?",
        "What fraction of the GPU's peak matrix rate does the leader reach, and what bounds it?",
        "Are the tensor cores doing the matrix products, or the CUDA cores?",
        "Where does the time go on the slowest scenario category, and what would change it?",
    ],
    DECLARED_LIMIT: [
        "Which measurement shows that this is the limit? Compare it with the roofline floor.",
        "cuDNN reaches far more TFLOP/s on the same shapes: what does it do that you do not?",
        "If you had to get 20% more, which layer would you change first, and why?",
    ],
    SUSPICIOUS_WIN: [
        "Which change explains this jump? Check that every output element is computed on every call.",
        "Does the kernel do its work on the stream it was given, within the timed region?",
        "Is the result the same for fresh inputs at new addresses, and on the hidden shapes?",
    ],
    BUDGET: [
        "The budget is spent: which single idea is worth the next steps?",
        "Summarise what worked and what did not, so the next session starts from it.",
    ],
    MANUAL: [
        "What are you trying now, and what result would make you change approach?",
        "Which layer of the system does your next change touch?",
    ],
}

# (trigger kind, its evidence, limit, session id, the caller's database session) -> suggestions
Provider = Callable[[str, dict[str, Any], int, int | None, Session | None], list[Suggestion]]
_provider: Provider | None = None


def set_provider(provider: Provider | None) -> None:
    """Let the question bank supply ranked questions for a session's pause."""
    global _provider
    _provider = provider


def session_state(db: Session, session: SteeringSession) -> SessionState:
    """What the session has, as question_bank/needs.py judges a question against it."""
    return SessionState(evaluations=session.evaluations, leader=session.leader_id is not None,
                        profile=session.leader_id is not None and leader_profile(db, session) is not None)


def suggest(trigger_kind: str, evidence: dict[str, Any], limit: int = 4, *, session_id: int | None = None,
            db: Session | None = None) -> list[Suggestion]:
    """The pause's suggestions: the bank's ranking, else the starter questions; either way only
    those that fit what the session has (no "your last variants" before there are any)."""
    if _provider is not None:
        try:
            found = _provider(trigger_kind, evidence, limit, session_id, db)
        except Exception:  # a broken bank must not take the pause banner down
            found = []
        if found:
            return found[:limit]
    session = db.get(SteeringSession, session_id) if db is not None and session_id is not None else None
    state = session_state(db, session) if db is not None and session is not None else None
    texts = [t for t in STARTER_QUESTIONS.get(trigger_kind, []) if state is None or needs_of(t).unmet(state) is None]
    return [Suggestion(text) for text in texts[:limit]]
