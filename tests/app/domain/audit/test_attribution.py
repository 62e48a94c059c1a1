"""Attribution: each message delivered to the agent is credited with the leader gain over the
next K evaluations (the question bank's rule), read from the session's recorded events."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlmodel import select

from app.domain.audit.attribution import attribute
from app.domain.audit.record import load_record
from app.store.database import Database
from app.store.events import EventHub, Unit
from app.store.models import Intervention, SteeringSession
from tests.app.domain.audit.conftest import INFORMATION, QUESTION, RecordedSession, open_database


def record_events(database: Database, events: list[tuple[str, dict[str, Any]]], window: int) -> int:
    with Unit(database, EventHub()) as u:
        s = SteeringSession(title="recorded", agent="scripted", thresholds={"credit_window": window})
        u.db.add(s)
        u.db.flush()
        for kind, payload in events:
            u.record(s, kind, payload)
        return s.id or 0


def verdict(number: int, verdict: str, speedup: float | None) -> tuple[str, dict[str, Any]]:
    return "verdict", {"number": number, "verdict": verdict, "speedup": speedup, "reason": ""}


def message(ident: int, kind: str, text: str, trigger: int | None = None) -> tuple[str, dict[str, Any]]:
    return "intervention", {"intervention_id": ident, "author": "person", "kind": kind, "mode": "steer",
                            "text": text, "trigger_id": trigger}


SEQUENCE = [
    verdict(1, "backup", 0.9),
    verdict(2, "leader", 1.5),
    ("trigger", {"trigger_id": 1, "kind": "plateau", "summary": "Plateau: no new leader", "evidence": {}}),
    message(1, "question", "What bounds the kernel: memory or math?", trigger=1),
    message(2, "information", "cuDNN reaches 1.9x here.", trigger=1),
    ("delivered", {"intervention_ids": [1, 2], "texts": ["...", "..."]}),
    verdict(3, "rejected", None),
    verdict(4, "leader", 1.8),
    message(3, "question", "Did you look at the L2 hit rate?"),  # never delivered
    verdict(5, "backup", 1.7),
    message(4, "information", "Decode scenarios are memory bound."),
    ("delivered", {"intervention_ids": [4], "texts": ["..."]}),
    verdict(6, "leader", 2.7),
]


def test_each_delivered_message_is_credited_with_the_leader_gain_over_its_window(database: Database) -> None:
    sid = record_events(database, SEQUENCE, window=3)
    with database.session() as db:
        a = attribute(load_record(db, sid))
    assert [s.leader_after for s in a.steps] == [1.0, 1.5, 1.5, 1.8, 1.8, 2.7]
    assert [t.after_evaluations for t in a.triggers] == [2]
    q1, i1, q2, i2 = a.interventions
    assert (q1.label, i1.label, q2.label, i2.label) == ("Q1", "I1", "Q2", "I2")
    # Delivered after evaluation 2 (leader 1.5): the window is evaluations 3, 4, 5; leader 1.8.
    for m in (q1, i1):
        assert m.after_evaluations == 2 and m.leader_before == 1.5 and m.leader_after == 1.8
        assert m.gain == pytest.approx(1.2) and m.evaluations_seen == 3 and m.complete
        assert m.candidates == [3, 4, 5] and m.new_leaders == [4]
        assert m.trigger_kind == "plateau"
    assert q2.delivered_seq is None and q2.gain is None and q2.candidates == []
    # Delivered after evaluation 5: one evaluation seen so far, a 1.5x gain, window not complete.
    assert i2.gain == pytest.approx(2.7 / 1.8) and i2.evaluations_seen == 1 and not i2.complete
    assert a.by_kind["question"].uses == 1 and a.by_kind["question"].geomean_gain == pytest.approx(1.2)
    assert a.by_kind["information"].uses == 2
    assert a.by_kind["information"].geomean_gain == pytest.approx(math.sqrt(1.2 * 1.5))
    assert a.by_kind["information"].hit_rate == pytest.approx(1.0)


def test_a_window_without_a_new_leader_is_credited_with_no_gain(database: Database) -> None:
    sid = record_events(database, [verdict(1, "leader", 2.0), message(1, "question", "Why?"),
                                   ("delivered", {"intervention_ids": [1]}),
                                   verdict(2, "backup", 1.9), verdict(3, "rejected", None)], window=5)
    with database.session() as db:
        (m,) = attribute(load_record(db, sid)).interventions
    assert m.gain == pytest.approx(1.0) and m.evaluations_seen == 2 and m.new_leaders == []


def test_attribution_of_a_recorded_session_agrees_with_the_servers_own_credit(recorded: RecordedSession) -> None:
    database = open_database(recorded.db_path)
    try:
        with database.session() as db:
            record = load_record(db, recorded.session_id)
            a = attribute(record)
            stored = {i.text: i for i in db.exec(select(Intervention)
                                                  .where(Intervention.session_id == recorded.session_id))}
    finally:
        database.dispose()
    by_text = {m.text: m for m in a.interventions}
    assert set(by_text) == {QUESTION, INFORMATION}
    leader_before = a.steps[2].leader_after  # both delivered after the plateau at evaluation 3
    for text, m in by_text.items():
        assert m.after_evaluations == 3 and m.trigger_kind == "plateau"
        assert m.leader_before == pytest.approx(leader_before)
        assert m.new_leaders == [4] and m.gain is not None and m.gain > 1.5
        assert m.gain == pytest.approx(stored[text].credited_gain)
    assert by_text[QUESTION].kind == "question" and by_text[INFORMATION].kind == "information"
    assert QUESTION in by_text[QUESTION].reply  # the scripted agent acknowledges what it heard
