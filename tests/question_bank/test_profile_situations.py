"""The bank answers from the profile (question_bank/situations.py): the leader's findings put the
questions written for them on top of the ranking and make auto-ask ask them."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlmodel import Session

from question_bank.auto_ask import AutoAsker, AutoAskPolicy, PauseState, set_policy
from question_bank.models import BankQuestion
from question_bank.ranking import rank_for_pause
from question_bank.situations import FINDING_QUESTIONS
from question_bank.store import ensure_starter_bank, list_questions

T0 = datetime(2026, 12, 6, 3, 0, 0, tzinfo=UTC)


def test_every_situation_names_questions_of_the_starter_bank(db: Session) -> None:
    ensure_starter_bank(db)
    keys = {q.key for q in list_questions(db)}
    assert {k for ks in FINDING_QUESTIONS.values() for k in ks} <= keys


def test_hopper_without_hgmma_ranks_the_warpgroup_mma_question_first(db: Session) -> None:
    ensure_starter_bank(db)
    before = rank_for_pause(db, "3", "plateau", problem="attention-forward", limit=1)[0]
    assert before.question.key != "which-mma-instructions-issue"  # not first without the profile
    top = rank_for_pause(db, "3", "plateau", problem="attention-forward", limit=3,
                         findings=("no_wgmma_on_hopper", "decode_far_from_bandwidth"))
    assert top[0].question.key == "which-mma-instructions-issue"
    assert "matches the profile: no wgmma on hopper" in top[0].reasons
    assert top[1].question.key in FINDING_QUESTIONS["decode_far_from_bandwidth"]


def test_auto_ask_asks_the_question_the_diagnosis_matches(db: Session) -> None:
    ensure_starter_bank(db)
    set_policy(db, 9, AutoAskPolicy("at_once"))
    sent: list[BankQuestion] = []

    def deliver(q: BankQuestion, reason: str) -> str:
        sent.append(q)
        return "iv-1"

    pause = PauseState(session_ref="9", trigger="declared_limit", paused_at=T0, problem="attention-forward",
                       findings=("decode_far_from_bandwidth",))
    asked = AutoAsker(lambda: T0).ask_if_due(db, pause, eval_index=3, leader=2.0, deliver=deliver)
    assert asked is not None and sent[0].key == "decode-bandwidth-fraction"


def test_each_shape_finding_of_a_hopper_kernel_ranks_one_of_its_own_questions_first(db: Session) -> None:
    ensure_starter_bank(db)
    for code in ("loop_below_roofline", "causal_imbalance", "tile_edges", "small_head_dim_lags",
                 "chunked_behind_peer", "gqa_behind_peer"):
        top = rank_for_pause(db, "3", "plateau", problem="attention-forward", limit=1, findings=(code,))[0]
        assert top.question.key in FINDING_QUESTIONS[code], (code, top.question.key)
        assert f"matches the profile: {code.replace('_', ' ')}" in top.reasons


def test_every_category_behind_its_peer_has_questions_of_its_own() -> None:
    from harness.profile import CATEGORY_MOVES

    assert {f"{category}_behind_peer" for category in CATEGORY_MOVES} <= set(FINDING_QUESTIONS)
