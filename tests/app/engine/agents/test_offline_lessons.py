"""The offline agent's priors from lessons (lessons/use.py: priors; Task.priors): a lesson seen on
this architecture from a leader like the agent's moves its action ahead of the agent's own order;
a setting a lesson measured from this very leader without a gain is never measured again; a
lesson from another architecture, or with `lessons: false`, changes nothing. Played with the
synthetic H100 of tests/family_model.py (tests/app/engine/agents/test_offline_measured.py: Play)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.engine.agents.offline import OfflineAgent, start_knobs
from kernels.attention.family import knobs_from_mapping
from lessons.distill import setting_hash
from tests.app.engine.agents.test_offline_measured import TASK, Play
from tests.family_model import knobs_of_source

FIRST_PORT = start_knobs("first-port").to_dict()


def prior(knob: str, before: Any, after: Any, ratio: float, *, arch: str = "sm_90", confidence: float = 0.8,
          measured_from: dict[str, Any] | None = None, lesson_id: int = 7) -> dict[str, Any]:
    return {"id": lesson_id, "changes": {knob: [before, after]}, "layers": ["math"], "engine": "mma_sync",
            "arch": arch, "ratio": ratio, "confidence": confidence, "count": 3, "fit": 1.0,
            "measured": [{"parent": setting_hash(measured_from), "ratio": ratio, "broke": 0}] if measured_from else []}


def agent(priors: list[dict[str, Any]], **config: Any) -> OfflineAgent:
    return OfflineAgent(replace(TASK, priors=priors), {"strategy": "measured", "seed": 3, **config})


def submitted_after_first_port(a: OfflineAgent, evaluations: int) -> list[dict[str, Any]]:
    p = Play(a, plateau=100)
    p.play(evaluations)
    return [knobs_from_mapping(knobs_from_slug(s, p)).to_dict() for s in p.submitted[1:]]


def knobs_from_slug(slug: str, p: Play) -> dict[str, Any]:
    for step in p.steps:
        for call in step.tool_calls:
            if "source" in call.args:
                knobs = knobs_of_source(call.args["source"])
                if knobs is not None and knobs_from_mapping(knobs).slug() == slug:
                    return knobs
    raise AssertionError(slug)


def test_without_lessons_the_diagnosis_leads_and_with_one_its_action_comes_first() -> None:
    plain = submitted_after_first_port(agent([]), 3)
    assert plain[0]["mma"] == "wgmma"  # the measured agent's own first move on Hopper

    taught = agent([prior("softmax_exp", "expf", "exp2_folded", 1.09)])
    got = submitted_after_first_port(taught, 3)
    assert got[0]["softmax_exp"] == "exp2_folded" and got[0]["mma"] == "mma_sync"
    assert got[1]["mma"] == "wgmma"  # then its own order resumes


def test_the_lessons_notes_name_the_lesson_and_the_expected_gain() -> None:
    a = agent([prior("softmax_exp", "expf", "exp2_folded", 1.09, lesson_id=42)])
    p = Play(a, plateau=100)
    p.play(2)
    second = [c for s in p.steps for c in s.tool_calls if "source" in c.args][1]
    assert "lesson #42" in second.args["notes"] and "expected gain: about 1.09x" in second.args["notes"]
    assert any("A lesson (#42)" in s.text for s in p.steps)


def test_a_setting_a_lesson_measured_from_this_leader_without_a_gain_is_never_run() -> None:
    loser = prior("mma", "mma_sync", "wgmma", 0.8, confidence=0.2, measured_from=FIRST_PORT)
    a = agent([loser])
    p = Play(a, plateau=100)
    p.play(10)
    first_port_wgmma = knobs_from_mapping({**FIRST_PORT, "mma": "wgmma"}).slug()
    assert first_port_wgmma not in p.submitted
    a.best = dict(FIRST_PORT)
    assert a._known(knobs_from_mapping({**FIRST_PORT, "mma": "wgmma"}))
    # the same change from another leader is not known: it is measured there
    fresh = agent([loser])
    fresh.best = {**FIRST_PORT, "softmax_exp": "exp2_folded"}
    assert not fresh._known(knobs_from_mapping({**fresh.best, "mma": "wgmma"}))


def test_a_lesson_from_another_architecture_or_with_lessons_off_changes_nothing() -> None:
    plain = submitted_after_first_port(agent([]), 3)
    elsewhere = submitted_after_first_port(agent([prior("softmax_exp", "expf", "exp2_folded", 1.3, arch="sm_80")]), 3)
    off = submitted_after_first_port(agent([prior("softmax_exp", "expf", "exp2_folded", 1.3)], lessons=False), 3)
    assert plain == elsewhere == off


def test_a_lesson_that_did_not_pay_off_or_is_unsure_is_not_taken_first() -> None:
    plain = submitted_after_first_port(agent([]), 2)
    hurt = submitted_after_first_port(agent([prior("softmax_exp", "expf", "exp2_folded", 0.95)]), 2)
    unsure = submitted_after_first_port(agent([prior("softmax_exp", "expf", "exp2_folded", 1.2, confidence=0.34)]),
                                        2)
    assert plain == hurt == unsure
