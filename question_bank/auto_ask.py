"""Auto-ask: a session's policy for letting the bank answer a pause by itself.

  off          the bank only suggests; a person asks.
  after_idle   if no person has acted for `idle_seconds` since the pause began (or since their
               last action during it), the bank sends its top question.
  at_once      the bank sends its top question as soon as the session pauses.

The bank asks at most once per pause, and at most `max_in_a_row` times in a row without a
person's message in between (an agent that keeps declaring "done" must not spin the session
on the bank's questions alone). The caller (the session runner) delivers the question and
records it as an intervention authored by the bank; `ask_if_due` records the bank's use for the
evidence. Time comes from an injected clock so that the timing is testable."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from sqlmodel import Session

from question_bank.evidence import DEFAULT_WINDOW, record_use
from question_bank.models import Author, BankAutoAsk, BankQuestion, BankUse, as_utc, utcnow
from question_bank.needs import SessionState
from question_bank.ranking import RankedQuestion, rank_for_pause

Clock = Callable[[], datetime]
MAX_IDLE_SECONDS = 24 * 3600.0
MAX_IN_A_ROW = 20


class AutoAskMode(StrEnum):
    OFF = "off"
    AFTER_IDLE = "after_idle"
    AT_ONCE = "at_once"


@dataclass(frozen=True)
class AutoAskPolicy:
    mode: str = AutoAskMode.OFF.value
    idle_seconds: float = 120.0
    max_in_a_row: int = 3

    def __post_init__(self) -> None:
        if self.mode not in tuple(m.value for m in AutoAskMode):
            raise ValueError(f"auto-ask mode must be off, after_idle or at_once, got {self.mode!r}")
        if not 0 < self.idle_seconds <= MAX_IDLE_SECONDS:
            raise ValueError(f"idle_seconds must be between 0 and {MAX_IDLE_SECONDS:.0f}, got {self.idle_seconds}")
        if not 1 <= self.max_in_a_row <= MAX_IN_A_ROW:
            raise ValueError(f"max_in_a_row must be between 1 and {MAX_IN_A_ROW}, got {self.max_in_a_row}")

    def describe(self) -> str:
        limit = f", at most {self.max_in_a_row} in a row without a person"
        if self.mode == AutoAskMode.AT_ONCE.value:
            return f"the bank asks as soon as the session pauses{limit}"
        if self.mode == AutoAskMode.AFTER_IDLE.value:
            return f"the bank asks after {self.idle_seconds:g} s without a person{limit}"
        return "off: the bank only suggests"


def get_policy(session: Session, session_ref: str | int) -> AutoAskPolicy:
    row = session.get(BankAutoAsk, str(session_ref))
    return AutoAskPolicy(row.mode, row.idle_seconds, row.max_in_a_row) if row else AutoAskPolicy()


def set_policy(session: Session, session_ref: str | int, policy: AutoAskPolicy) -> AutoAskPolicy:
    row = session.get(BankAutoAsk, str(session_ref)) or BankAutoAsk(session_ref=str(session_ref))
    row.mode = policy.mode
    row.idle_seconds = policy.idle_seconds
    row.max_in_a_row = policy.max_in_a_row
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    return policy


@dataclass(frozen=True)
class PauseState:
    """What the runner knows about the current pause of a session."""

    session_ref: str
    trigger: str
    paused_at: datetime
    last_person_at: datetime | None = None   # a person's last action in this session, if any
    bank_asked: bool = False                 # the bank already asked during this pause
    bank_asks_in_a_row: int = 0              # bank questions since a person's last message
    problem: str | None = None
    arch: str | None = None
    extra_layers: Mapping[str, int] = field(default_factory=dict)
    findings: tuple[str, ...] = ()  # the leader's profile's finding codes (question_bank/situations.py)
    state: SessionState | None = None  # what the session has: a question presuming more is not asked


def due_at(policy: AutoAskPolicy, pause: PauseState) -> datetime | None:
    """When the bank should ask during this pause (aware UTC), or None if it should not."""
    if policy.mode == AutoAskMode.OFF.value or pause.bank_asked:
        return None
    if pause.bank_asks_in_a_row >= policy.max_in_a_row:
        return None
    paused = as_utc(pause.paused_at)
    if policy.mode == AutoAskMode.AT_ONCE.value:
        return paused
    start = paused
    if pause.last_person_at is not None:
        start = max(start, as_utc(pause.last_person_at))
    return start + timedelta(seconds=policy.idle_seconds)


def is_due(policy: AutoAskPolicy, pause: PauseState, now: datetime) -> bool:
    when = due_at(policy, pause)
    return when is not None and as_utc(now) >= when


@dataclass(frozen=True)
class BankAsk:
    """The bank's choice, delivered and recorded."""

    question: BankQuestion
    ranked: RankedQuestion
    use: BankUse
    intervention_ref: str | None


# Delivers the bank's question to the session (recording the intervention, author "bank") and
# returns the intervention's id, or None if it could not be delivered (the session moved on).
Deliver = Callable[[BankQuestion, str], str | int | None]


class AutoAsker:
    def __init__(self, clock: Clock = utcnow, window: int = DEFAULT_WINDOW) -> None:
        self.clock = clock
        self.window = window

    def seconds_until_due(self, session: Session, pause: PauseState) -> float | None:
        """Seconds to wait before calling `ask_if_due` again (0: now), or None: never this pause."""
        when = due_at(get_policy(session, pause.session_ref), pause)
        if when is None:
            return None
        return max(0.0, (when - as_utc(self.clock())).total_seconds())

    def choose(self, session: Session, pause: PauseState) -> RankedQuestion | None:
        ranked = rank_for_pause(session, pause.session_ref, pause.trigger, problem=pause.problem,
                                arch=pause.arch, extra_layers=pause.extra_layers, limit=1,
                                findings=pause.findings, state=pause.state)
        return ranked[0] if ranked else None

    def ask_if_due(
        self, session: Session, pause: PauseState, *, eval_index: int, leader: float | None, deliver: Deliver,
        commit: bool = True,
    ) -> BankAsk | None:
        """If the policy says the bank should ask now, pick the top-ranked question, deliver it,
        and record the use (author: bank). Returns None when not due or nothing to ask.
        commit=False: the caller's transaction holds the delivery and the use together."""
        policy = get_policy(session, pause.session_ref)
        if not is_due(policy, pause, self.clock()):
            return None
        choice = self.choose(session, pause)
        if choice is None:
            return None
        reason = f"auto-ask ({policy.describe()}); top question for a {pause.trigger.replace('_', ' ')}"
        ref = deliver(choice.question, reason)
        if ref is None:
            return None
        use = record_use(
            session, session_ref=pause.session_ref, text=choice.question.text, kind=choice.question.kind,
            author=Author.BANK.value, eval_index=eval_index, leader=leader, question_id=choice.question.id,
            intervention_ref=ref, trigger=pause.trigger, window=self.window, used_at=self.clock(), commit=commit,
        )
        return BankAsk(choice.question, choice, use, str(ref))
