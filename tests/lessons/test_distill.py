"""Distillation without a database (lessons/distill.py) and over the shipped traces
(app/domain/lessons.py): candidate-over-parent observations, the merge (one lesson per situation
and action, count and spread, a contradiction lowering confidence), and the records that are not
lessons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.domain.lessons import facts_of_file
from app.settings import PROJECT_ROOT
from kernels.attention.family import knobs_from_mapping, render
from kernels.attention.family.space import default_knobs
from lessons.distill import (
    CandidateFacts,
    SessionFacts,
    arch_of_gpu,
    merge,
    observations,
    setting_hash,
    setting_of,
)
from lessons.models import LessonError, check_lesson

EXAMPLES = PROJECT_ROOT / "examples"
SCENARIOS = {"p64": {"category": "prefill", "head_dim": 64}, "p128": {"category": "prefill", "head_dim": 128},
             "dec": {"category": "decode", "head_dim": 128}}


def family(**changes: Any) -> str:
    return render(knobs_from_mapping({**default_knobs().to_dict(), **changes}))


def cand(number: int, source: str, times: dict[str, float], parent: int | None = None, title: str = "",
         failed: int = 0) -> CandidateFacts:
    return CandidateFacts(number, number, parent, title or f"c{number}", source, "backup", times, failed, number * 10)


def facts(*candidates: CandidateFacts, origin: dict[str, Any] | None = None, gpu: str = "NVIDIA H100 80GB HBM3"
          ) -> SessionFacts:
    return SessionFacts(origin or {"session_id": 4}, "attention-forward", gpu, SCENARIOS, list(candidates))


def test_a_family_file_gives_back_its_setting_with_the_defaults_it_leaves_out() -> None:
    knobs = knobs_from_mapping({**default_knobs().to_dict(), "softmax_exp": "expf", "stages": 1})
    assert setting_of(render(knobs)) == knobs.to_dict()
    assert setting_of("__global__ void k() {}") is None
    assert arch_of_gpu("NVIDIA H200") == arch_of_gpu("NVIDIA H100 80GB HBM3") == "sm_90"
    assert arch_of_gpu("NVIDIA A100-SXM4-80GB") == "sm_80" and arch_of_gpu("cpu") == "cpu"


def test_one_observation_per_child_with_the_knob_change_and_the_ratio_per_category() -> None:
    parent = cand(1, family(softmax_exp="expf"), {"p64": 2.0, "p128": 4.0, "dec": 1.0})
    child = cand(2, family(softmax_exp="exp2_folded"), {"p64": 1.0, "p128": 2.0, "dec": 1.25}, parent=1)
    again = cand(3, family(softmax_exp="expf"), {"p64": 2.0, "p128": 4.0, "dec": 1.0}, parent=1)  # no change
    [obs] = observations(facts(parent, child, again))
    assert obs.action == {"kind": "knobs", "changes": {"softmax_exp": ["expf", "exp2_folded"]}, "layers": ["math"]}
    assert obs.evidence["categories"] == {"prefill": 2.0, "decode": 0.8}
    assert obs.evidence["head_dims"] == {"64": 2.0, "128": pytest.approx((2.0 * 0.8) ** 0.5, rel=1e-4)}
    assert obs.evidence["ratio"] == pytest.approx((2.0 * 2.0 * 0.8) ** (1 / 3), rel=1e-4)
    assert obs.evidence["key"] == "session:4:2" and obs.evidence["candidate"] == 2 and obs.evidence["parent"] == 1
    assert obs.evidence["parent_setting"] == setting_hash(setting_of(parent.source) or {})
    assert obs.situation["arch"] == "sm_90" and obs.situation["engine"] == "mma_sync"
    assert "softmax_exp=exp2_folded" in obs.tags and "math" in obs.tags


def test_a_child_that_fails_what_its_parent_passed_counts_as_broken() -> None:
    parent = cand(1, family(stages=2), {"p64": 2.0, "p128": 4.0, "dec": 1.0})
    child = cand(2, family(stages=1), {"p64": 1.0}, parent=1, failed=2)
    [obs] = observations(facts(parent, child))
    assert obs.evidence["broke"] == 2
    lesson = merge(None, obs)
    assert lesson["helped"] == 0 and lesson["effect"]["overall"]["broke"] == 1
    assert "broke correctness 1 time" in lesson["text"]


def test_an_edit_without_knobs_is_named_by_what_it_added_and_removed() -> None:
    before = "__global__ void k() { asm(\"mma.sync.aligned.m16n8k16\"); expf(x); }"
    after = "__global__ void k() { asm(\"wgmma.mma_async.sync\"); exp2f(x); }"
    [obs] = observations(facts(cand(1, before, {"p64": 2.0}), cand(2, after, {"p64": 1.0}, parent=1,
                                                                    title="warpgroup MMA")))
    assert obs.action["kind"] == "edit"
    assert obs.action["added"] == ["exp2", "wgmma"] and obs.action["removed"] == ["mma.sync"]
    assert obs.key.endswith("|edit|+exp2,+wgmma,-mma.sync") and obs.situation["engine"] == "mma.sync"
    assert obs.action["summary"] == "warpgroup MMA (+exp2, +wgmma, -mma.sync)"


def test_repeated_evidence_merges_into_one_lesson_and_a_contradiction_lowers_its_confidence() -> None:
    def seen(session: int, speed_after: float) -> Any:
        parent = cand(1, family(pack_gqa="off"), {"dec": 2.0})
        child = cand(2, family(pack_gqa="decode"), {"dec": 2.0 / speed_after}, parent=1)
        [obs] = observations(facts(parent, child, origin={"session_id": session}))
        return obs

    lesson = merge(None, seen(1, 1.5))
    assert (lesson["count"], lesson["helped"], lesson["confidence"]) == (1, 1, pytest.approx(2 / 3, abs=1e-3))
    assert lesson["status"] == "proposed"
    lesson = merge(lesson, seen(2, 1.3))
    assert (lesson["count"], lesson["helped"]) == (2, 2) and lesson["status"] == "active"
    assert lesson["effect"]["overall"]["min"] == pytest.approx(1.3) and lesson["effect"]["overall"]["max"] == 1.5
    assert merge(lesson, seen(2, 1.3)) == lesson  # the same evidence again changes nothing
    confident = lesson["confidence"]
    lesson = merge(lesson, seen(3, 0.8))
    assert lesson["count"] == 3 and lesson["helped"] == 2 and lesson["confidence"] < confident
    assert lesson["scope"]["holds"]["category"] == ["decode"] and lesson["scope"]["arch"] == ["sm_90"]


def test_a_record_without_a_situation_or_an_action_is_not_a_lesson() -> None:
    with pytest.raises(LessonError, match="needs a situation"):
        check_lesson({"problem": "attention-forward"}, {"kind": "knobs", "changes": {"a": [1, 2]}})
    with pytest.raises(LessonError, match="needs an action"):
        check_lesson({"arch": "sm_90", "problem": "attention-forward"}, {"kind": "wish"})
    with pytest.raises(LessonError, match="at least one knob"):
        check_lesson({"arch": "sm_90", "problem": "attention-forward"}, {"kind": "knobs", "changes": {}})


def test_the_shipped_traces_distil_into_lessons_with_evidence_links() -> None:
    files = sorted(EXAMPLES.rglob("*.jsonl*"))
    assert len(files) >= 20
    lessons: dict[str, dict[str, Any]] = {}
    for path in files:
        for f in facts_of_file(path):
            for obs in observations(f):
                lessons[obs.key] = merge(lessons.get(obs.key), obs)
    assert len(lessons) >= 10
    for lesson in lessons.values():
        for e in lesson["evidence"]:
            assert e["trace"] and Path(EXAMPLES, e["trace"].split("#")[0]).name in {p.name for p in files}
            assert isinstance(e["candidate"], int) and isinstance(e["parent"], int) and len(e["sha"]) == 16
    wgmma = [x for x in lessons.values() if x["action"].get("changes", {}).get("mma") == ["mma_sync", "wgmma"]]
    assert wgmma and max(x["ratio"] for x in wgmma) > 1.3  # the Hopper layer paid off on the H200
    assert sum(x["status"] == "active" for x in lessons.values()) >= 3


def test_a_file_that_is_not_a_trace_is_refused_by_name(tmp_path: Path) -> None:
    from app.domain.audit.trace_io import TraceFormatError

    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"type": "header", "format": "something else"}\n')
    with pytest.raises(TraceFormatError, match=r"notes\.jsonl"):
        facts_of_file(bad)
