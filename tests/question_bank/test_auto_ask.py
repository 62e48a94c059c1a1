"""Auto-ask timing, with an injected clock: off, after T seconds without a person, at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session

from question_bank.auto_ask import AutoAsker, AutoAskPolicy, PauseState, due_at, get_policy, set_policy
from question_bank.evidence import record_evaluation, uses_of_session
from question_bank.models import BankQuestion
from question_bank.store import ensure_starter_bank

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Inbox:
    """Stands in for the session runner: records what the bank delivered, as interventions."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str]] = []

    def __call__(self, question: BankQuestion, reason: str) -> str:
        self.delivered.append((question.text, reason))
        return f"iv-{len(self.delivered)}"


@pytest.fixture
def bank(db: Session) -> Session:
    ensure_starter_bank(db)
    return db


def pause(**kw: object) -> PauseState:
    base: dict[str, object] = {"session_ref": "7", "trigger": "plateau", "paused_at": T0}
    base.update(kw)
    return PauseState(**base)  # type: ignore[arg-type]


def test_a_session_without_a_policy_never_auto_asks(bank: Session) -> None:
    clock, inbox = FakeClock(T0), Inbox()
    asker = AutoAsker(clock)
    assert get_policy(bank, 7).mode == "off"
    clock.advance(10_000)
    assert asker.ask_if_due(bank, pause(), eval_index=4, leader=1.2, deliver=inbox) is None
    assert asker.seconds_until_due(bank, pause()) is None
    assert inbox.delivered == []


def test_at_once_asks_as_soon_as_the_session_pauses(bank: Session) -> None:
    set_policy(bank, 7, AutoAskPolicy("at_once"))
    clock, inbox = FakeClock(T0), Inbox()
    asked = AutoAsker(clock).ask_if_due(bank, pause(), eval_index=4, leader=1.2, deliver=inbox)
    assert asked is not None and asked.intervention_ref == "iv-1"
    assert "plateau" in asked.question.triggers
    assert "the bank asks as soon as the session pauses" in inbox.delivered[0][1]


def test_after_idle_waits_t_seconds_without_a_person(bank: Session) -> None:
    set_policy(bank, "7", AutoAskPolicy("after_idle", idle_seconds=90))
    clock, inbox = FakeClock(T0), Inbox()
    asker = AutoAsker(clock)
    assert asker.seconds_until_due(bank, pause()) == 90
    clock.advance(89.9)
    assert asker.ask_if_due(bank, pause(), eval_index=4, leader=1.2, deliver=inbox) is None
    clock.advance(0.1)
    assert asker.seconds_until_due(bank, pause()) == 0
    asked = asker.ask_if_due(bank, pause(), eval_index=4, leader=1.2, deliver=inbox)
    assert asked is not None and len(inbox.delivered) == 1


def test_a_person_acting_during_the_pause_restarts_the_wait(bank: Session) -> None:
    set_policy(bank, "7", AutoAskPolicy("after_idle", idle_seconds=60))
    clock, inbox = FakeClock(T0), Inbox()
    asker = AutoAsker(clock)
    clock.advance(50)
    present = pause(last_person_at=clock.now)          # a person typed, or opened the composer
    clock.advance(59)
    assert asker.ask_if_due(bank, present, eval_index=0, leader=None, deliver=inbox) is None
    assert asker.seconds_until_due(bank, present) == pytest.approx(1)
    clock.advance(1)
    assert asker.ask_if_due(bank, present, eval_index=0, leader=None, deliver=inbox) is not None
    # A person's action before the pause began does not shorten or extend anything.
    earlier = pause(last_person_at=T0 - timedelta(hours=1))
    assert due_at(AutoAskPolicy("after_idle", 60), earlier) == T0 + timedelta(seconds=60)


def test_the_bank_asks_once_per_pause(bank: Session) -> None:
    set_policy(bank, "7", AutoAskPolicy("at_once"))
    clock = FakeClock(T0)
    assert due_at(get_policy(bank, "7"), pause(bank_asked=True)) is None
    assert AutoAsker(clock).seconds_until_due(bank, pause(bank_asked=True)) is None


def test_the_bank_s_question_is_recorded_as_its_own_use_and_earns_evidence(bank: Session) -> None:
    set_policy(bank, "7", AutoAskPolicy("at_once"))
    clock, inbox = FakeClock(T0), Inbox()
    asked = AutoAsker(clock, window=2).ask_if_due(bank, pause(), eval_index=4, leader=1.25, deliver=inbox)
    assert asked is not None
    [use] = uses_of_session(bank, "7")
    assert (use.author, use.intervention_ref, use.trigger) == ("bank", "iv-1", "plateau")
    assert use.question_id == asked.question.id and use.used_at == T0
    record_evaluation(bank, session_ref="7", eval_index=5, leader=1.25)
    record_evaluation(bank, session_ref="7", eval_index=6, leader=1.5)
    bank.refresh(use)
    assert use.gain == pytest.approx(1.2)
    # The next pause does not repeat what the bank just asked.
    clock.advance(600)
    again = AutoAsker(clock).ask_if_due(bank, pause(paused_at=clock.now), eval_index=6, leader=1.5, deliver=inbox)
    assert again is not None and again.question.id != asked.question.id


def test_a_delivery_the_runner_refuses_records_nothing(bank: Session) -> None:
    set_policy(bank, "7", AutoAskPolicy("at_once"))
    asked = AutoAsker(FakeClock(T0)).ask_if_due(bank, pause(), eval_index=0, leader=None,
                                                 deliver=lambda q, why: None)
    assert asked is None and uses_of_session(bank, "7") == []


def test_policies_are_validated_and_stored_per_session(bank: Session) -> None:
    with pytest.raises(ValueError, match="mode"):
        AutoAskPolicy("sometimes")
    with pytest.raises(ValueError, match="idle_seconds"):
        AutoAskPolicy("after_idle", idle_seconds=0)
    set_policy(bank, "a", AutoAskPolicy("after_idle", 30))
    set_policy(bank, "b", AutoAskPolicy("at_once"))
    set_policy(bank, "a", AutoAskPolicy("after_idle", 45))
    assert get_policy(bank, "a") == AutoAskPolicy("after_idle", 45)
    assert get_policy(bank, "b").mode == "at_once"


def test_naive_and_aware_clocks_agree() -> None:
    naive = pause(paused_at=T0.replace(tzinfo=None))
    assert due_at(AutoAskPolicy("after_idle", 10), naive) == T0 + timedelta(seconds=10)


def test_the_bank_stops_after_max_in_a_row_without_a_person(bank: Session) -> None:
    set_policy(bank, "7", AutoAskPolicy("at_once", max_in_a_row=2))
    asker = AutoAsker(FakeClock(T0))
    assert asker.seconds_until_due(bank, pause(bank_asks_in_a_row=1)) == 0
    assert asker.seconds_until_due(bank, pause(bank_asks_in_a_row=2)) is None
    with pytest.raises(ValueError, match="max_in_a_row"):
        AutoAskPolicy("at_once", max_in_a_row=0)
    assert "at most 2 in a row" in get_policy(bank, "7").describe()
