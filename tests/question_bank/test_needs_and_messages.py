"""Issue 49: suggested questions fit what the session has (question_bank/needs.py), and a
campaign's instruction is read as its question, its parent and the parent's knobs, never as a
line of JSON (question_bank/evidence.py: message_parts, knob_changes)."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from question_bank.evidence import evidence_table, knob_changes, message_parts, record_use
from question_bank.needs import Needs, SessionState, needs_of
from question_bank.ranking import rank_for_pause
from question_bank.store import ensure_starter_bank, get_by_key

NOTHING_YET = SessionState(evaluations=0, leader=False, profile=False)
A_LOT = SessionState(evaluations=12, leader=True, profile=True)


@pytest.mark.parametrize(("text", "needs"), [
    ("Which part of the kernel have you not changed in your last ten candidates?", Needs(evaluations=10)),
    ("Does your latest candidate differ from the ones three steps back in anything but constants?",
     Needs(evaluations=4)),
    ("Your last variants all tune the same loop. Which layer have you not touched?", Needs(evaluations=2)),
    ("Which change explains this jump?", Needs(evaluations=1)),
    ("What fraction of the roofline does the leader reach?", Needs(leader=True)),
    ("What does the leader's profile say bounds it?", Needs(leader=True, profile=True)),
    ("Across your last 3 evaluations, what moved?", Needs(evaluations=3)),
    ("Which layer have you not touched at all so far?", Needs()),
    ("What measurement shows this is the limit - a profile, a roofline fraction?", Needs()),
    ("Between a block's last exponential and the next issue, what runs?", Needs()),
])
def test_needs_are_read_from_the_words(text: str, needs: Needs) -> None:
    assert needs_of(text) == needs


def test_an_unmet_need_says_why() -> None:
    assert needs_of("your last ten candidates").unmet(NOTHING_YET) == "needs 10 evaluations (the session has 0)"
    assert needs_of("does the leader reach").unmet(SessionState(3, False, False)) == \
        "asks about the leader, and no candidate leads yet"
    assert needs_of("the leader's profile").unmet(SessionState(3, True, False)) == \
        "asks about the leader's profile, and there is none yet"
    assert needs_of("your last ten candidates").unmet(A_LOT) is None


def test_a_pause_before_any_evaluation_suggests_nothing_that_presumes_one(db: Session) -> None:
    ensure_starter_bank(db)
    early = rank_for_pause(db, "s1", "plateau", problem="attention-forward", limit=None, state=NOTHING_YET)
    keys = {r.question.key for r in early}
    assert keys and "which-part-not-touched" not in keys  # "your last ten candidates"
    assert "same-candidate-different-constants" not in keys and "decode-bandwidth-fraction" not in keys
    assert all(needs_of(r.question.text).unmet(NOTHING_YET) is None for r in early)
    later = {r.question.key for r in rank_for_pause(db, "s1", "plateau", problem="attention-forward", limit=None,
                                                    state=A_LOT)}
    assert {"which-part-not-touched", "same-candidate-different-constants", "decode-bandwidth-fraction"} <= later
    unknown = {r.question.key for r in rank_for_pause(db, "s1", "plateau", problem="attention-forward", limit=None)}
    assert unknown == later  # no state given: nothing left out for it (campaign children, older callers)


def test_a_campaign_instruction_is_its_question_its_parent_and_the_parents_knobs() -> None:
    text = ('For causal scenarios, how many tiles are fully masked?\n\nParent: session 8 candidate #1; knobs '
            '{"tile_d64":"64x64x4","stages":1,"causal_skip":false,"persistent":false}')
    parts = message_parts(text)
    assert parts.question == "For causal scenarios, how many tiles are fully masked?"
    assert parts.parent == "session 8 candidate #1"
    assert parts.knobs == {"tile_d64": "64x64x4", "stages": 1, "causal_skip": False, "persistent": False}
    assert knob_changes(parts.knobs, {**parts.knobs, "causal_skip": True, "stages": 2, "split_kv": "on"}) == [
        "stages: 1 -> 2", "causal_skip: false -> true", "split_kv: (unset) -> on"]
    assert message_parts("Parent: session 1 candidate #2").parent == ""  # no question before it: plain text
    broken = message_parts("Q?\n\nParent: session 8 candidate #1; knobs {not json")
    assert broken.question == "Q?\n\nParent: session 8 candidate #1; knobs {not json" and broken.knobs is None


def test_a_campaign_instruction_counts_for_its_bank_question(db: Session) -> None:
    ensure_starter_bank(db)
    q = get_by_key(db, "fully-masked-tiles")
    assert q is not None
    text = f"{q.text}\n\nParent: session 8 candidate #1; knobs {{\"causal_skip\":false}}"
    use = record_use(db, session_ref=3, text=text, eval_index=1, leader=8.7, author="bank")
    assert use.question_id == q.id
    record_use(db, session_ref=4, text="What now?\n\nParent: session 9 candidate #2; knobs {\"a\":1}", eval_index=0,
               leader=None)
    record_use(db, session_ref=5, text="What now?\n\nParent: session 7 candidate #3; knobs {\"a\":2}", eval_index=0,
               leader=None)
    table = evidence_table(db)
    assert [r.text for r in table.unbanked] == ["What now?"]  # one message, not one per parent
    assert table.unbanked[0].stats.uses == 2 and len(table.unbanked[0].uses) == 2
    assert [r.key for r in table.rows] == ["fully-masked-tiles"] and table.rows[0].uses[0].id == use.id
