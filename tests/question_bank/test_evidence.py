"""Evidence arithmetic: each message is credited with the leader gain over the next K evaluations,
until the next message reaches the agent: no new leader is credited twice."""

from __future__ import annotations

import math

import pytest
from sqlmodel import Session

from question_bank.curation import QuestionDraft, add_question
from question_bank.evidence import (
    evidence_table,
    question_evidence,
    record_evaluation,
    record_use,
    silent_gains,
    stats_of,
    uses_of_session,
)


def _q(db: Session, text: str, layers: list[str]) -> int:
    q = add_question(db, QuestionDraft(text=text, triggers=["plateau"], layers=layers))
    assert q.id is not None
    return q.id


def test_a_recorded_session_is_credited_window_by_window(db: Session) -> None:
    qa = _q(db, "Which layer have you not touched?", ["algorithm"])
    qb = _q(db, "Is the last wave full?", ["scheduling"])
    K = 5
    # The recorded sequence: (evaluation number, leader after it) and messages between them.
    sequence: list[tuple[str, object]] = [
        ("eval", (1, 1.00)),
        ("ask", ("Which layer have you not touched?", "question", 1, 1.00)),   # bank question, typed
        ("eval", (2, 1.00)),
        ("eval", (3, 1.10)),
        ("ask", ("FA3 reaches 75% of peak at d256.", "information", 3, 1.10)),
        ("eval", (4, 1.10)),
        ("eval", (5, 1.10)),
        ("eval", (6, 1.21)),
        ("eval", (7, 1.21)),
        ("eval", (8, 1.21)),
        ("ask", ("Is the last wave full?", "question", 8, 1.21)),
        ("eval", (9, 1.21)),
    ]
    for what, data in sequence:
        if what == "eval":
            n, leader = data  # type: ignore[misc]
            record_evaluation(db, session_ref=1, eval_index=n, leader=leader)
        else:
            text, kind, at, leader = data  # type: ignore[misc]
            record_use(db, session_ref=1, text=text, kind=kind, eval_index=at, leader=leader, window=K)

    a, info, b = uses_of_session(db, 1)
    # The typed text matched bank questions, so their uses are the questions' uses.
    assert (a.question_id, info.question_id, b.question_id) == (qa, None, qb)
    # a's window ends where the information arrived (after eval 3): evals 2..3, the 1.10x leader.
    assert (a.evaluations_seen, a.window) == (2, 2) and a.complete and a.gain == pytest.approx(1.10)
    assert info.evaluations_seen == 5 and info.gain == pytest.approx(1.21 / 1.10)     # evals 4..8
    assert b.evaluations_seen == 1 and not b.complete and b.gain == pytest.approx(1.0)  # eval 9 so far
    # Each new leader is credited once: the gains multiply to the session's own gain.
    assert a.gain * info.gain * b.gain == pytest.approx(1.21)

    per_question = question_evidence(db)
    assert per_question[qa].geomean_gain == pytest.approx(1.10)
    assert per_question[qa].hit_rate == 1.0
    assert per_question[qb].geomean_gain == pytest.approx(1.0) and per_question[qb].hit_rate == 0.0

    table = evidence_table(db)
    questions = table.overall["question"]
    assert questions.uses == 2 and questions.credited == 2
    assert questions.geomean_gain == pytest.approx(math.sqrt(1.10))   # geomean of 1.10 and 1.0
    assert questions.hit_rate == 0.5
    information = table.overall["information"]
    assert information.geomean_gain == pytest.approx(1.1) and information.hit_rate == 1.0
    assert table.rows[0].key == "which-layer-have-you-not-touched"
    assert [r.text for r in table.unbanked] == ["FA3 reaches 75% of peak at d256."]


def test_messages_delivered_together_share_their_boundary_and_count_once(db: Session) -> None:
    from question_bank.evidence import credit_groups

    record_use(db, session_ref=7, text="Overlap the waits?", eval_index=2, leader=2.0, window=4)
    record_use(db, session_ref=7, text="Which layer is left?", eval_index=2, leader=2.0, window=4)
    record_evaluation(db, session_ref=7, eval_index=3, leader=3.0)
    record_use(db, session_ref=7, text="Split the KV?", eval_index=3, leader=3.0, window=4)
    record_evaluation(db, session_ref=7, eval_index=4, leader=4.5)
    first, second, third = uses_of_session(db, 7)
    assert first.gain == second.gain == pytest.approx(1.5) and first.complete and second.complete
    assert third.gain == pytest.approx(1.5)
    groups = credit_groups(uses_of_session(db, 7))
    assert [len(g) for g in groups] == [2, 1]
    # Counted once per group, the gains make the session's own: 2.0 -> 4.5.
    assert groups[0][0].gain * groups[1][0].gain == pytest.approx(4.5 / 2.0)


def test_replaying_an_evaluation_changes_nothing_and_old_ones_do_not_override(db: Session) -> None:
    use = record_use(db, session_ref="s", text="Typed by a person?", eval_index=0, leader=None, window=3)
    assert use.leader_before == 1.0  # no leader yet: the baseline
    record_evaluation(db, session_ref="s", eval_index=1, leader=1.05)
    record_evaluation(db, session_ref="s", eval_index=2, leader=1.30)
    record_evaluation(db, session_ref="s", eval_index=2, leader=1.30)
    record_evaluation(db, session_ref="s", eval_index=1, leader=1.05)
    db.refresh(use)
    assert use.evaluations_seen == 2 and use.gain == pytest.approx(1.30)


def test_a_leader_demoted_by_retiming_lowers_the_gain_again(db: Session) -> None:
    use = record_use(db, session_ref="s", text="Is it real?", eval_index=4, leader=2.0, window=3)
    record_evaluation(db, session_ref="s", eval_index=5, leader=2.6)
    record_evaluation(db, session_ref="s", eval_index=6, leader=2.2)
    db.refresh(use)
    assert use.gain == pytest.approx(1.1)


def test_evaluations_outside_the_window_or_of_other_sessions_are_not_credited(db: Session) -> None:
    use = record_use(db, session_ref="s", text="Why?", eval_index=2, leader=1.0, window=2)
    assert record_evaluation(db, session_ref="other", eval_index=3, leader=9.0) == 0
    assert record_evaluation(db, session_ref="s", eval_index=2, leader=9.0) == 0   # before the message
    record_evaluation(db, session_ref="s", eval_index=4, leader=1.5)
    assert record_evaluation(db, session_ref="s", eval_index=5, leader=3.0) == 0   # past K
    db.refresh(use)
    assert use.gain == pytest.approx(1.5) and use.complete


def test_a_message_with_no_evaluation_after_it_is_counted_but_not_credited(db: Session) -> None:
    qid = _q(db, "What bounds it?", ["measurement"])
    record_use(db, session_ref="a", text="What bounds it?", eval_index=0, leader=1.0, question_id=qid)
    record_evaluation(db, session_ref="a", eval_index=1, leader=1.2)
    record_use(db, session_ref="b", text="What bounds it?", eval_index=7, leader=1.0, question_id=qid)
    stats = question_evidence(db)[qid]
    assert stats.uses == 2 and stats.credited == 1 and stats.geomean_gain == pytest.approx(1.2)


def test_shrinkage_keeps_one_lucky_use_below_a_steady_record() -> None:
    lucky = stats_of([1.5])
    steady = stats_of([1.2] * 8)
    assert lucky.geomean_gain > steady.geomean_gain
    assert steady.shrunk_log_gain > lucky.shrunk_log_gain


def test_record_use_refuses_nonsense(db: Session) -> None:
    with pytest.raises(ValueError, match="kind"):
        record_use(db, session_ref=1, text="x", kind="rant", eval_index=0, leader=1.0)
    with pytest.raises(ValueError, match="author"):
        record_use(db, session_ref=1, text="x", author="ghost", eval_index=0, leader=1.0)
    with pytest.raises(ValueError, match="no bank question"):
        record_use(db, session_ref=1, text="x", eval_index=0, leader=1.0, question_id=999)


# -- the silent control ----------------------------------------------------------------------

LEADERS = [1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 4.0, 4.0, 6.0]  # [n]: the leader after n evaluations


def test_a_silent_resume_is_credited_like_a_message_over_its_next_k_evaluations() -> None:
    # resumed after 2 evaluations: evaluations 3..5 (K=3) see the leader go 2.0 -> 3.0
    assert silent_gains(LEADERS, [], [2], window=3) == [pytest.approx(1.5)]
    # after 5: 6..8 -> 3.0 -> 4.0; after 8 with K=5: only 9 and 10 have been judged -> 4.0 -> 6.0
    assert silent_gains(LEADERS, [], [5], window=3) == [pytest.approx(4 / 3)]
    assert silent_gains(LEADERS, [], [8], window=5) == [pytest.approx(1.5)]
    # no evaluation after it yet: counted, not credited
    assert silent_gains(LEADERS, [], [10], window=3) == [None]
    assert stats_of(silent_gains(LEADERS, [], [10], window=3)).credited == 0


def test_a_silent_window_ends_at_the_next_resume_or_message_so_no_leader_counts_twice() -> None:
    # resumes after 2 and after 3: the first owns evaluation 3 only (leader still 2.0),
    # the second owns 4..8 and the leaders at 4 and 8 (2.0 -> 4.0)
    assert silent_gains(LEADERS, [], [2, 3], window=5) == [pytest.approx(1.0), pytest.approx(2.0)]
    # a message after 3 ends the silent window that began after 2 before the leader at 4
    assert silent_gains(LEADERS, [3], [2], window=5) == [pytest.approx(1.0)]
    # two resumes at the same point (paused again before any evaluation) are one
    assert silent_gains(LEADERS, [], [2, 2], window=3) == [pytest.approx(1.5)]


def test_a_resume_while_a_message_still_steers_the_agent_is_no_control() -> None:
    # a message after 1 with K=3 covers evaluations 2..4: a resume after 2 or 3 is left out,
    # one after 4 (the window has closed) counts, and one at the message's own point never does
    assert silent_gains(LEADERS, [1], [2, 3], window=3) == []
    assert silent_gains(LEADERS, [1], [1], window=3) == []
    assert silent_gains(LEADERS, [1], [4], window=3) == [pytest.approx(1.0)]
    # a later message cuts the earlier one's window: a resume after it is covered by it instead
    assert silent_gains(LEADERS, [1, 5], [6], window=3) == []
    with pytest.raises(ValueError, match="at least one evaluation"):
        silent_gains(LEADERS, [], [1], window=0)


def test_a_questions_evidence_carries_its_interval_from_two_credited_uses(db: Session) -> None:
    qid = _q(db, "What bounds the kernel now?", ["measurement"])
    for ref, after in (("a", 1.2), ("b", 1.5), ("c", None)):
        record_use(db, session_ref=ref, text="What bounds the kernel now?", eval_index=0, leader=1.0)
        if after is not None:
            record_evaluation(db, session_ref=ref, eval_index=1, leader=after)
    stats = question_evidence(db)[qid]
    assert (stats.uses, stats.credited) == (3, 2)
    assert stats.interval is not None
    low, high = stats.interval
    assert stats.geomean_gain == pytest.approx(math.sqrt(1.2 * 1.5))
    assert low < stats.geomean_gain < high
    assert stats.to_dict()["interval"] == [low, high]
    one = stats_of([1.3])
    assert one.interval is None and one.to_dict()["interval"] is None
