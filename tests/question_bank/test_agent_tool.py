"""The agent's tool: a situation in, a few questions out (texts only, no curator notes)."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from question_bank.agent_tool import TOOL_SPEC, ToolInputError, consult_bank
from question_bank.evidence import uses_of_session
from question_bank.store import ensure_starter_bank


@pytest.fixture
def bank(db: Session) -> Session:
    ensure_starter_bank(db)
    return db


def test_the_tool_spec_is_a_valid_anthropic_tool_definition() -> None:
    assert TOOL_SPEC["name"] == "consult_question_bank"
    schema = TOOL_SPEC["input_schema"]
    assert schema["type"] == "object" and schema["required"] == ["situation"]


def test_a_situation_returns_a_few_questions_without_curator_notes(bank: Session) -> None:
    out = consult_bank(bank, {"situation": "stuck: causal scenarios are as slow as non-causal ones",
                              "trigger": "plateau"})
    assert len(out["questions"]) == 3
    for q in out["questions"]:
        assert set(q) == {"text", "layers"}
        assert q["text"].endswith("?")
    assert any("masking" in q["layers"] for q in out["questions"])
    assert "not answers" in out["note"]


def test_layers_already_tried_are_steered_away_from(bank: Session) -> None:
    out = consult_bank(bank, {"situation": "tuning tile sizes and the copy pipeline", "trigger": "plateau",
                              "layers_tried": ["memory", "pipeline", "tensor_cores"], "limit": 4})
    assert len(out["questions"]) == 4
    for q in out["questions"]:
        assert set(q["layers"]) - {"memory", "pipeline", "tensor_cores"}


def test_a_suspicious_win_gets_measurement_questions(bank: Session) -> None:
    out = consult_bank(bank, {"situation": "my new kernel is 40x faster than the baseline",
                              "trigger": "suspicious_win", "limit": 2})
    assert all("measurement" in q["layers"] or "precision" in q["layers"] or "masking" in q["layers"]
               for q in out["questions"])


def test_within_a_session_the_answers_are_recorded_and_not_repeated(bank: Session) -> None:
    first = consult_bank(bank, {"situation": "no progress for ten candidates", "trigger": "plateau", "limit": 2},
                         session_ref="s", eval_index=10, leader=1.4)
    uses = uses_of_session(bank, "s")
    assert [u.author for u in uses] == ["agent", "agent"]
    assert [u.text for u in uses] == [q["text"] for q in first["questions"]]
    second = consult_bank(bank, {"situation": "no progress for ten candidates", "trigger": "plateau", "limit": 2},
                          session_ref="s")
    assert not {q["text"] for q in first["questions"]} & {q["text"] for q in second["questions"]}
    assert len(uses_of_session(bank, "s")) == 2   # no eval_index: nothing recorded


@pytest.mark.parametrize("arguments, message", [
    ({}, "'situation' must be a non-empty string"),
    ({"situation": "  "}, "'situation' must be a non-empty string"),
    ({"situation": "x", "trigger": "bored"}, "'trigger' must be one of"),
    ({"situation": "x", "layers_tried": ["vibes"]}, "'layers_tried' must be a list"),
    ({"situation": "x", "limit": 9}, "'limit' must be an integer from 1 to 5"),
    ({"situation": "x", "limit": True}, "'limit' must be an integer from 1 to 5"),
    ({"situation": "x", "mood": "sad"}, "unknown argument(s): mood"),
])
def test_bad_arguments_get_a_message_the_agent_can_act_on(bank: Session, arguments: dict, message: str) -> None:
    with pytest.raises(ToolInputError) as info:
        consult_bank(bank, arguments)
    assert message in str(info.value)
