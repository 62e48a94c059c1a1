"""The cost section's knowledge layer (app/domain/audit/cost.py): the `knowledge` events the
runner records (lessons chosen for the prompt, each `read_lessons` call) counted, their seconds
and tokens summed, and their share of the session's tokens and running seconds."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.audit.cost import session_cost
from app.domain.audit.record import AuditRecord
from app.store.models import Event, SteeringSession


def record(events: list[tuple[str, dict[str, Any]]], used_seconds: float = 10.0) -> AuditRecord:
    session = SteeringSession(id=1, title="t", used_seconds=used_seconds)
    rows = [Event(session_id=1, seq=n, kind=kind, payload=payload) for n, (kind, payload) in enumerate(events, 1)]
    return AuditRecord(session=session, candidates=[], evaluations=[], triggers=[], interventions=[], events=rows,
                       baseline_source=None)


def step(input_tokens: int, output_tokens: int) -> tuple[str, dict[str, Any]]:
    return ("agent_step", {"agent": "claude", "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                                         "cost_usd": 0.01}})


def test_readings_seconds_tokens_and_their_share_are_counted() -> None:
    cost = session_cost(record([
        ("knowledge", {"what": "prompt", "seconds": 0.5, "tokens": 120, "lessons": [3, 4], "priors": 2}),
        step(900, 100),
        ("knowledge", {"what": "read_lessons", "seconds": 1.5, "tokens": 80, "lessons": [4, 7]}),
        step(700, 300),
        ("knowledge", {"what": "read_lessons", "seconds": 0.25, "tokens": 0, "lessons": []}),
    ]))
    k = cost.knowledge
    assert (k.events, k.prompts, k.readings) == (3, 1, 2)
    assert k.seconds == pytest.approx(2.25) and k.tokens == 200
    assert k.lessons == [3, 4, 7]
    assert k.token_share == pytest.approx(200 / 2000)  # of every token the session's steps used
    assert k.second_share == pytest.approx(2.25 / 10.0)
    assert cost.where["generation"] == 400  # the generation's tokens, shown beside them


def test_without_knowledge_events_or_with_odd_payloads_nothing_is_guessed() -> None:
    assert session_cost(record([step(10, 5)])).knowledge.events == 0
    cost = session_cost(record([("knowledge", {"what": "read_lessons", "seconds": "slow", "tokens": -3,
                                               "lessons": "all"})], used_seconds=0.0))
    k = cost.knowledge
    assert (k.events, k.readings, k.seconds, k.tokens, k.lessons) == (1, 1, 0.0, 0, [])
    assert k.token_share is None and k.second_share is None  # nothing to compare with
