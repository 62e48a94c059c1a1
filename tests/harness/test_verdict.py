"""The verdict of an evaluation (verifier rule 5): accepted only with every scenario passed,
hidden ones included, and no sanity flag; each reason readable by a person."""

from __future__ import annotations

import json

from harness.report import (
    ACCEPTED,
    BLOCKED,
    FAIL,
    NOT_COMPILED,
    PASS,
    REJECTED,
    CompileInfo,
    EvaluationReport,
    ScenarioResult,
    render_table,
)


def scenario(name: str, hidden: bool = False, status: str = PASS, reason: str = "",
             speedup: float | None = 1.2, flags: list[str] | None = None,
             timed: bool = True) -> ScenarioResult:
    return ScenarioResult(
        name, "prefill", hidden, status, reason, time_ms=1.0 if timed else None,
        speedup_vs_baseline=speedup if status == PASS else None, flags=list(flags or []),
    )


def report(*results: ScenarioResult, compiled: bool = True) -> EvaluationReport:
    return EvaluationReport(
        kernel="k.cu", baseline="baseline.cu", gpu="NVIDIA H200", suite="all",
        scenarios=list(results), compile=CompileInfo(ok=compiled),
    )


def test_all_passed_with_hidden_scenarios_and_no_flag_is_accepted() -> None:
    v = report(scenario("a"), scenario("b", hidden=True)).verdict()
    assert v.status == ACCEPTED
    assert v.reasons == ["all 2 scenarios passed (1 hidden) with no sanity flag"]


def test_failures_reject_with_their_reasons_grouped() -> None:
    stale = "trial 1: output was stale: none of the 8 output elements was written"
    v = report(
        scenario("a", status=FAIL, reason=stale),
        scenario("b", status=FAIL, reason=stale.replace("trial 1", "trial 2")),
        scenario("c", hidden=True, status=FAIL, reason="the kernel modified its input q"),
    ).verdict()
    assert v.status == REJECTED
    assert v.reasons[0] == f"fail: {stale[9:]} [a and 1 more]"
    assert v.reasons[1] == "fail: the kernel modified its input q [c (hidden)]"


def test_failing_only_hidden_scenarios_is_named_over_fitting() -> None:
    v = report(
        scenario("a"), scenario("b"),
        scenario("h", hidden=True, status=FAIL, reason="trial 1: wrong result: max error"),
    ).verdict()
    assert v.status == REJECTED
    assert v.reasons[0] == (
        "over-fit to the visible scenarios: all 2 visible scenarios pass but 1 of 1 hidden "
        "ones fail"
    )


def test_a_kernel_refused_before_running_is_rejected_with_the_static_reason() -> None:
    why = "static checks refused the kernel: line 3: calls std::thread: starts host threads"
    v = report(scenario("a", status=NOT_COMPILED, reason=why), compiled=False).verdict()
    assert v.status == REJECTED and v.reasons == [f"not run: {why}"]


def test_an_impossible_flag_blocks_the_verdict_until_re_verified() -> None:
    flag = "impossible: 0.0010 ms is under the roofline floor 0.0500 ms"
    v = report(scenario("a", flags=[flag]), scenario("b", hidden=True)).verdict()
    assert v.status == BLOCKED and v.reasons == [f"re-verify a: {flag}"]


def test_wall_clock_flag_blocks_and_informational_flags_do_not() -> None:
    wall = "wall-clock 2.0 ms per call vs 0.1 ms on the device timer: work runs outside"
    blocked = report(scenario("a", flags=[wall]), scenario("b", hidden=True)).verdict()
    assert blocked.status == BLOCKED
    fine = report(scenario("a", flags=["baseline not timed: x"]), scenario("b", hidden=True))
    assert fine.verdict().status == ACCEPTED


def test_without_hidden_scenarios_there_is_no_verdict() -> None:
    v = report(scenario("a"), scenario("b")).verdict()
    assert v.status == BLOCKED
    assert v.reasons == [
        "a verdict needs the hidden scenarios: this evaluation ran 2 visible scenario(s) and "
        "no hidden one"
    ]


def test_correctness_only_evaluations_are_blocked() -> None:
    v = report(scenario("a", timed=False), scenario("b", hidden=True, timed=False)).verdict()
    assert v.status == BLOCKED and "not timed (correctness only)" in v.reasons[0]


def test_a_visible_speedup_that_does_not_carry_to_hidden_scenarios_blocks() -> None:
    visible = [scenario(f"v{i}", speedup=3.0) for i in range(5)]
    hidden = [scenario(f"h{i}", hidden=True, speedup=1.5) for i in range(5)]
    v = report(*visible, *hidden).verdict()
    assert v.status == BLOCKED
    assert v.reasons == [
        "over-fit: the geomean speedup over the baseline is 3.00x on visible scenarios but "
        "1.50x on hidden ones"
    ]


def test_the_verdict_is_in_the_json_and_the_table() -> None:
    rep = report(scenario("a"), scenario("b", hidden=True))
    data = json.loads(rep.to_json())
    assert data["verdict"] == {"status": ACCEPTED, "reasons": rep.verdict().reasons}
    assert EvaluationReport.from_dict(data).verdict() == rep.verdict()
    text = render_table(rep)
    assert "verdict: ACCEPTED" in text
