"""Ranking the bank for a pause: trigger, explored layers, evidence, no repeats."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from question_bank.evidence import record_evaluation, record_use
from question_bank.models import BankQuestion
from question_bank.ranking import PauseSituation, rank, rank_for_pause
from question_bank.store import ensure_starter_bank, get_by_key, list_questions


@pytest.fixture
def bank(db: Session) -> Session:
    ensure_starter_bank(db)
    return db


def keys(ranked: list) -> list[str]:
    return [r.question.key for r in ranked]


@pytest.mark.parametrize("trigger", ["plateau", "declared_limit", "suspicious_win", "budget"])
def test_each_trigger_ranks_questions_written_for_it_first(bank: Session, trigger: str) -> None:
    ranked = rank_for_pause(bank, "s1", trigger, problem="attention-forward", arch="sm_90a", limit=5)
    assert len(ranked) == 5
    for r in ranked:
        assert trigger in r.question.triggers, (trigger, r.question.key)
        assert r.question.kind == "question"
    label = trigger.replace("_", " ")
    assert f"written for a {label}" in ranked[0].reasons
    assert all(f"written for a {label}" in r.reasons or f"suits a {label}" in r.reasons for r in ranked)


def test_suspicious_win_leads_with_measurement(bank: Session) -> None:
    ranked = rank_for_pause(bank, "s1", "suspicious_win", limit=3)
    assert "measurement" in ranked[0].question.layers


def test_budget_pause_offers_budget_questions_before_general_ones(bank: Session) -> None:
    ranked = rank_for_pause(bank, "s1", "budget", limit=8)
    budget_positions = [i for i, r in enumerate(ranked) if "budget" in r.question.triggers]
    other_positions = [i for i, r in enumerate(ranked) if "budget" not in r.question.triggers]
    assert budget_positions and other_positions and max(budget_positions) < min(other_positions)
    assert all("any" in ranked[i].question.triggers for i in other_positions)


def test_a_manual_pause_mixes_layers_in_its_first_suggestions(bank: Session) -> None:
    ranked = rank_for_pause(bank, "s1", "manual", limit=4)
    first_layers = [r.question.layers[0] for r in ranked]
    assert len(set(first_layers)) >= 3


def test_unexplored_layers_rise_above_explored_ones(bank: Session) -> None:
    explored = {"memory": 3, "pipeline": 2, "tensor_cores": 2}
    ranked = rank_for_pause(bank, "s1", "plateau", extra_layers=explored, limit=4)
    for r in ranked:
        assert any(layer not in explored for layer in r.question.layers), r.question.key
    fresh = rank_for_pause(bank, "s1", "plateau", limit=40)
    touched = [r for r in fresh if set(r.question.layers) <= set(explored)]
    assert touched, "the starter bank has plateau questions only about these layers"
    assert all("already explored" not in " ".join(r.reasons) for r in fresh)
    again = rank_for_pause(bank, "s1", "plateau", extra_layers=explored, limit=40)
    assert any("already explored" in " ".join(r.reasons) for r in again)


def test_layers_named_by_earlier_messages_count_as_explored(bank: Session) -> None:
    for key in ("v-tile-bank-conflicts", "how-kv-tiles-reach-shared-memory", "output-tile-store"):
        q = get_by_key(bank, key)
        assert q is not None
        record_use(bank, session_ref="s1", text=q.text, eval_index=0, leader=1.0, question_id=q.id)
    ranked = rank_for_pause(bank, "s1", "plateau", limit=3)
    assert all("memory" not in r.question.layers for r in ranked)


def test_what_was_just_asked_is_not_suggested_again(bank: Session) -> None:
    top = rank_for_pause(bank, "s1", "plateau", limit=1)[0].question
    record_use(bank, session_ref="s1", text=top.text, eval_index=3, leader=1.0, question_id=top.id)
    assert top.key not in keys(rank_for_pause(bank, "s1", "plateau", limit=50))
    # Another session has not heard it.
    assert keys(rank_for_pause(bank, "s2", "plateau", limit=1)) == [top.key]
    # Three messages later it may come back, lowered for having been asked in this session.
    for i in range(3):
        record_use(bank, session_ref="s1", text=f"Typed question number {i}?", eval_index=3, leader=1.0)
    back = {r.question.key: r for r in rank_for_pause(bank, "s1", "plateau", limit=50)}
    assert top.key in back and "asked earlier in this session" in back[top.key].reasons


def test_a_typed_message_with_a_bank_question_s_text_also_counts_as_just_asked(bank: Session) -> None:
    top = rank_for_pause(bank, "s1", "declared_limit", limit=1)[0].question
    record_use(bank, session_ref="s1", text=f"  {top.text.upper()} ", eval_index=0, leader=1.0)
    assert top.key not in keys(rank_for_pause(bank, "s1", "declared_limit", limit=50))


def test_evidence_lifts_a_question_that_worked_before(bank: Session) -> None:
    plain = [r.question.key for r in rank_for_pause(bank, "s9", "plateau", limit=50)
             if "plateau" in r.question.triggers and r.question.kind == "question"]
    low = get_by_key(bank, plain[-1])
    assert low is not None
    for n in range(6):   # six sessions, each with a 15% better leader after the question
        ref = f"past-{n}"
        record_use(bank, session_ref=ref, text=low.text, eval_index=0, leader=1.0, question_id=low.id)
        record_evaluation(bank, session_ref=ref, eval_index=1, leader=1.15)
    ranked = rank_for_pause(bank, "s9", "plateau", limit=3)
    assert low.key in keys(ranked)
    reasons = next(r.reasons for r in ranked if r.question.key == low.key)
    assert "leader 1.150x after it (6 uses)" in reasons


def test_evidence_of_no_gain_lowers_a_question(bank: Session) -> None:
    top = rank_for_pause(bank, "s9", "plateau", limit=1)[0].question
    for n in range(6):
        ref = f"past-{n}"
        record_use(bank, session_ref=ref, text=top.text, eval_index=0, leader=1.3, question_id=top.id)
        record_evaluation(bank, session_ref=ref, eval_index=5, leader=1.3)
    assert rank_for_pause(bank, "s9", "plateau", limit=1)[0].question.key != top.key


def test_retired_and_out_of_scope_questions_are_not_suggested(bank: Session) -> None:
    top = rank_for_pause(bank, "s1", "plateau", limit=1)[0].question
    top.status = "retired"
    bank.commit()
    assert top.key not in keys(rank_for_pause(bank, "s1", "plateau", limit=50))
    blackwell = rank_for_pause(bank, "s1", "suspicious_win", arch="sm_100a", limit=50)
    assert blackwell and all(r.question.archs == [] for r in blackwell)
    other_problem = rank_for_pause(bank, "s1", "budget", problem="matmul", limit=50)
    assert all(r.question.problem is None for r in other_problem)


def test_information_ranks_below_questions_of_the_same_fit() -> None:
    q = BankQuestion(id=1, key="q", text="Is it bound by memory?", triggers=["plateau"], layers=["masking"])
    i = BankQuestion(id=2, key="i", text="Causal does half the work.", kind="information",
                     triggers=["plateau"], layers=["masking"])
    ranked = rank([i, q], PauseSituation(trigger="plateau"))
    assert keys(ranked) == ["q", "i"]
    assert "information, not a question" in ranked[1].reasons


def test_an_unknown_trigger_is_refused() -> None:
    with pytest.raises(ValueError, match="trigger must be one of"):
        PauseSituation(trigger="boredom")


def test_every_active_question_is_ranked_when_no_limit_is_given(bank: Session) -> None:
    situation = PauseSituation(trigger="manual")
    assert len(rank(list_questions(bank), situation)) == len(list_questions(bank, status="active"))
