"""Curating the bank: add, edit, retire, merge duplicates, promote a session message."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from question_bank.curation import (
    BankValidationError,
    NotFound,
    QuestionDraft,
    add_question,
    edit_question,
    merge_questions,
    promote_message,
    retire_question,
    set_status,
)
from question_bank.evidence import question_evidence, record_evaluation, record_use
from question_bank.store import get_question, list_questions


def draft(text: str = "Is the last wave full?", **kw: object) -> QuestionDraft:
    base: dict[str, object] = {"text": text, "triggers": ["plateau"], "layers": ["scheduling"]}
    base.update(kw)
    return QuestionDraft(**base)  # type: ignore[arg-type]


def test_adding_a_question_derives_a_readable_key(db: Session) -> None:
    q = add_question(db, draft("  Is the last   wave full?  "))
    assert q.key == "is-the-last-wave-full" and q.text == "Is the last wave full?"
    other = add_question(db, draft("Is the last wave full, really?"))
    assert other.key == "is-the-last-wave-full-really"


def test_every_invalid_field_is_reported_and_nothing_is_written(db: Session) -> None:
    with pytest.raises(BankValidationError) as info:
        add_question(db, QuestionDraft(text="A statement.", triggers=["someday"], layers=[], archs=["hopper"],
                                       key="Bad Key"))
    assert set(info.value.errors) == {"text", "triggers", "layers", "archs", "key"}
    assert "a question must ask something" in info.value.errors["text"]
    assert list_questions(db) == []


def test_the_same_text_cannot_be_added_twice(db: Session) -> None:
    first = add_question(db, draft())
    with pytest.raises(BankValidationError, match=first.key):
        add_question(db, draft("is the LAST wave full?"))


def test_editing_keeps_the_key_and_refuses_a_taken_one(db: Session) -> None:
    a = add_question(db, draft())
    b = add_question(db, draft("Which barrier is redundant?", layers=["pipeline"]))
    assert a.id is not None and b.id is not None
    edited = edit_question(db, a.id, draft("Is the last wave of blocks full?", layers=["scheduling", "memory"]))
    assert edited.key == a.key and edited.layers == ["scheduling", "memory"]
    with pytest.raises(BankValidationError, match="taken"):
        edit_question(db, a.id, draft("Is the last wave of blocks full?", key=b.key))
    with pytest.raises(NotFound):
        edit_question(db, 999, draft())


def test_retiring_keeps_the_question_but_not_among_the_active(db: Session) -> None:
    q = add_question(db, draft())
    assert q.id is not None
    retire_question(db, q.id)
    assert list_questions(db, status="active") == []
    assert [x.key for x in list_questions(db, status="retired")] == [q.key]
    set_status(db, q.id, "active")
    assert len(list_questions(db, status="active")) == 1


def test_merging_duplicates_moves_their_evidence_and_retires_them(db: Session) -> None:
    keep = add_question(db, draft("What bounds this kernel now?", layers=["measurement"]))
    dup1 = add_question(db, draft("What is the bottleneck now?", triggers=["declared_limit"], layers=["memory"]))
    dup2 = add_question(db, draft("Which resource is saturated?", layers=["tensor_cores"]))
    assert keep.id and dup1.id and dup2.id
    for ref, (q, gain) in enumerate([(keep, 1.1), (dup1, 1.3), (dup2, 1.0)]):
        record_use(db, session_ref=ref, text=q.text, eval_index=0, leader=1.0, question_id=q.id)
        record_evaluation(db, session_ref=ref, eval_index=1, leader=gain)

    merged = merge_questions(db, keep.id, [dup1.id, dup2.id, keep.id])
    assert merged.triggers == ["plateau", "declared_limit"]
    assert merged.layers == ["measurement", "memory", "tensor_cores"]
    assert "merged what-is-the-bottleneck-now, which-resource-is-saturated" in merged.provenance
    evidence = question_evidence(db)
    assert set(evidence) == {keep.id} and evidence[keep.id].uses == 3
    assert evidence[keep.id].geomean_gain == pytest.approx((1.1 * 1.3 * 1.0) ** (1 / 3))
    for d in (dup1, dup2):
        got = get_question(db, d.id)  # type: ignore[arg-type]
        assert got is not None and got.status == "retired" and got.merged_into_id == keep.id
    with pytest.raises(BankValidationError, match="merged into another"):
        set_status(db, dup1.id, "active")
    with pytest.raises(BankValidationError, match="at least one other"):
        merge_questions(db, keep.id, [keep.id])


def test_a_merged_question_s_own_merges_follow_it(db: Session) -> None:
    a = add_question(db, draft("Question A?"))
    b = add_question(db, draft("Question B?"))
    c = add_question(db, draft("Question C?"))
    assert a.id and b.id and c.id
    merge_questions(db, b.id, [c.id])
    merge_questions(db, a.id, [b.id])
    got = get_question(db, c.id)
    assert got is not None and got.merged_into_id == a.id


def test_promoting_a_message_brings_its_evidence_along(db: Session) -> None:
    text = "Are the stores of the output tile coalesced?"
    record_use(db, session_ref=12, text=text, eval_index=3, leader=1.0, intervention_ref=40)
    record_evaluation(db, session_ref=12, eval_index=4, leader=1.25)
    record_use(db, session_ref=13, text=text.lower(), eval_index=0, leader=1.0)   # sent again elsewhere
    result = promote_message(db, draft(text, layers=["memory"]), session_ref=12, message_ref=40,
                             promoted_by="ana")
    assert result.created and len(result.uses_linked) == 2
    q = result.question
    assert q.provenance == "promoted by ana from session 12, message 40"
    assert question_evidence(db)[q.id].geomean_gain == pytest.approx(1.25)  # type: ignore[index]
    # Promoting the same text again finds the question already in the bank.
    again = promote_message(db, draft(text, layers=["memory"]), session_ref=13)
    assert not again.created and again.question.id == q.id


def test_promoting_information_keeps_its_kind(db: Session) -> None:
    result = promote_message(db, draft("Causal does half the work.", kind="information", layers=["masking"]),
                             session_ref=1)
    assert result.question.kind == "information"
