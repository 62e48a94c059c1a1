"""The report (harness/report.py): geomeans per part of the suite, JSON, the table and its notes."""

from __future__ import annotations

import json

import pytest

from harness.report import (
    CRASH,
    FAIL,
    PASS,
    CompileInfo,
    EvaluationReport,
    PeerResult,
    ScenarioResult,
    render_geomeans,
    render_table,
)


def _result(name: str, hidden: bool, status: str, base: float | None, cudnn: float | None,
            t: float = 1.0) -> ScenarioResult:
    r = ScenarioResult(name, "prefill", hidden, status, time_ms=t, tflops=100.0 / t)
    r.speedup_vs_baseline = base
    if cudnn is not None:
        r.speedup_vs_peers["cudnn"] = cudnn
        r.peers["cudnn"] = PeerResult("ok", time_ms=t * cudnn)
    return r


def _report() -> EvaluationReport:
    return EvaluationReport(
        kernel="k.cu", baseline="baseline.cu", gpu="NVIDIA H200", suite="all",
        scenarios=[
            _result("a", False, PASS, 2.0, 0.5),
            _result("b", False, PASS, 8.0, 0.5),
            _result("c", True, PASS, 4.0, 2.0),
            _result("d", True, FAIL, None, None),
        ],
        compile=CompileInfo(ok=True),
    )


def test_geomeans_per_part_count_only_passed_scenarios() -> None:
    rep = _report()
    vis, hid, all_ = rep.summary("visible"), rep.summary("hidden"), rep.summary("all")
    assert vis.vs_baseline == pytest.approx(4.0) and vis.complete
    assert hid.vs_baseline == pytest.approx(4.0) and hid.passed == 1 and not hid.complete
    assert all_.vs_baseline == pytest.approx((2 * 8 * 4) ** (1 / 3))
    assert all_.vs_peers["cudnn"] == pytest.approx((0.5 * 0.5 * 2.0) ** (1 / 3))
    assert all_.vs_peers["flash"] is None
    assert not rep.all_passed


def test_report_json_round_trip() -> None:
    rep = _report()
    data = json.loads(rep.to_json())
    assert data["geomean"]["visible"]["vs_baseline"] == pytest.approx(4.0)
    back = EvaluationReport.from_dict(data)
    assert back.to_dict() == rep.to_dict()
    assert back.scenarios[0].peers["cudnn"].time_ms == pytest.approx(0.5)


def test_table_shows_every_scenario_status_and_geomeans() -> None:
    rep = _report()
    rep.scenarios.append(ScenarioResult("e", "decode", False, CRASH, "the evaluation process died"))
    text = render_table(rep)
    for name in "abcde":
        assert f"\n{name} " in text or text.startswith(name)
    assert "c (h)" in text
    assert "the evaluation process died" in text
    assert "geomean visible passed   2/3" in text
    assert "geomean hidden  passed   1/2" in text
    assert "vs baseline 4.000x" in text


def test_time_note_says_where_the_seconds_went() -> None:
    """The CLI's line under the table: the compile, the worker's setup and warm-up, and each
    phase summed over the scenarios in the evaluation's order."""
    report = _report()
    report.scenarios[0].phases = {"timing": 1.25, "correctness": 0.5}
    report.scenarios[1].phases = {"correctness": 0.25, "reference": 2.0, "integrity": 1.0}
    report.compile = CompileInfo(ok=True, cached=False, seconds=9.6)
    report.settings = {"device_info": {"setup_s": 0.04,
                                       "warm_up": {"seconds": 6.6, "scenarios_with_plans": 3}}}
    assert report.time_note() == (
        "compile 9.6 s; worker setup 0.0 s; warm-up 6.6 s beside the compile (peer plans for 3 of "
        "4 scenarios); per phase (s): correctness 0.8, reference 2.0, timing 1.2, integrity 1.0")
    bare = _report()
    bare.compile = CompileInfo(ok=True, cached=True)
    assert bare.time_note() == "compile cached"


def test_geomeans_leave_out_what_was_not_timed_and_refuse_a_speedup_that_cannot_be() -> None:
    rep = _report()
    rep.scenarios[0].speedup_vs_baseline = None  # timed without a baseline: left out
    assert rep.summary("visible").vs_baseline == pytest.approx(8.0)
    rep.scenarios[0].speedup_vs_baseline = 0.0  # no time gives that: a bug, not a value to drop
    with pytest.raises(ValueError, match=r"got 0\.0 "):
        rep.summary("visible")


def test_a_summary_counts_the_scenarios_its_geomean_is_over_and_never_more() -> None:
    """A chip read "all: 10/10 passed, 1.091x" while three rows said "baseline not timed": the
    geomean covers only the scenarios timed on both sides, and the summary says how many."""
    rows = [_result(f"s{i}", False, PASS, 1.1, 0.5) for i in range(10)]
    for r in rows[7:]:
        r.speedup_vs_baseline = None
        r.flags = ["baseline not timed: the baseline returned cudaErrorInvalidValue (1)"]
    rows[9].speedup_vs_peers.clear()
    rep = EvaluationReport("k.cu", "leader.cu", "NVIDIA H200", "all", rows, CompileInfo(ok=True))
    s = rep.summary("all")
    assert (s.scenarios, s.passed, s.timed, s.peers_timed["cudnn"], s.peers_timed["fa3"]) == (10, 10, 7, 9, 0)
    assert not s.fully_timed and s.complete
    assert s.ratio_words("leader #7") == "10/10 passed; 7 of 10 timed against leader #7, 1.100x over those 7"
    assert rep.to_dict()["geomean"]["all"]["timed"] == 7
    text = "\n".join(render_geomeans(rep))
    assert "vs baseline 1.100x (over 7 of 10)" in text and "vs cuDNN 0.500x (over 9 of 10)" in text
    for r in rows:
        r.speedup_vs_baseline = 1.1
    full = rep.summary("all")
    assert full.fully_timed and full.ratio_words() == "10/10 passed, 1.100x over all 10"
    assert "(over" not in render_geomeans(rep)[0].split("vs cuDNN")[0]
    for r in rows:
        r.speedup_vs_baseline = None
    assert rep.summary("all").ratio_words() == "10/10 passed; none timed against the baseline, no ratio"
