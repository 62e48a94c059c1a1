"""What a ratio is against, which way it goes and over how many scenarios (app/domain/audit/ratios.py):
the re-time summary rule -- a chip never counts a scenario that was not timed on both sides, and
names its comparison point -- the columns' help, the peers' names, and TFLOP/s and GB/s as shares
of the roofline the report measured (harness/profile.py's arithmetic)."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.audit.compare import leader_stats
from app.domain.audit.ratios import comparison_point, evaluation_view, ratio_help, retime_words
from app.domain.steering.goal import check
from app.store.models import Evaluation
from harness.profile import profile_report
from harness.report import PASS, CompileInfo, EvaluationReport, PeerResult, ScenarioResult

MATRIX_TFLOPS, COPY_GBPS = 640.0, 2900.0  # the roofline the harness measured (device_info)
UNTIMED = "baseline not timed: the baseline returned cudaErrorInvalidValue (1)"


def retime_report(untimed: tuple[int, ...] = (4, 5, 6), ratio: float = 1.091) -> dict[str, Any]:
    """A contender re-timed against the leader on 10 scenarios (the last two hidden), where the
    leader returned cudaErrorInvalidValue on `untimed`; cuDNN and FA2 timed everywhere, FA3 on
    the prefill ones only, and the measured roofline in device_info."""
    rows = []
    for i in range(10):
        decode = i >= 6
        t = 0.2 if decode else 1.0
        category = "decode" if decode else "prefill"
        r = ScenarioResult(f"{category}-d128-s{1024 * (i + 1)}", category, i >= 8, PASS,
                           flops=int(3.2e11 if not decode else 1e9), bytes=int(5e8), time_ms=t,
                           max_error=1e-3, tolerance=2e-2, reps=20)
        r.tflops = r.flops / (t * 1e-3) / 1e12
        r.gbps = r.bytes / (t * 1e-3) / 1e9
        if i in untimed:
            r.flags = [UNTIMED]
        else:
            r.baseline_ms, r.speedup_vs_baseline = t * ratio, ratio
        r.peers = {"cudnn": PeerResult("ok", t * 0.8), "flash": PeerResult("ok", t * 1.3)}
        r.speedup_vs_peers = {"cudnn": 0.8, "flash": 1.3}
        if not decode:
            r.peers["fa3"] = PeerResult("ok", t * 0.7)
            r.speedup_vs_peers["fa3"] = 0.7
        rows.append(r)
    settings = {"device": "cuda", "device_info": {"matrix_tflops": MATRIX_TFLOPS, "copy_gbps": COPY_GBPS,
                                                  "peers_unavailable": {}}}
    return EvaluationReport("candidate-8.cu", "candidate-7.cu", "NVIDIA H100 80GB HBM3", "all", rows,
                            CompileInfo(ok=True), settings=settings).to_dict()


def evaluation(report: dict[str, Any], purpose: str = "retime", against: str = "leader #7") -> Evaluation:
    return Evaluation(candidate_id=1, purpose=purpose, against=against, report=report, device="NVIDIA H100")


def test_a_retime_with_untimed_scenarios_says_how_many_were_timed_and_against_what() -> None:
    view = evaluation_view(evaluation(retime_report()))
    assert view.point == "leader #7" and view.column == "x leader #7"
    assert view.headline == "re-time vs leader #7: 7 of 10 scenarios timed, 1.091x over those 7"
    chips = {c.part: c for c in view.chips}
    assert chips["all"].text == "all: 10/10 passed; 7 of 10 timed against leader #7, 1.091x over those 7"
    assert chips["all"].partial and chips["visible"].partial and not chips["hidden"].partial
    assert chips["hidden"].text == "hidden: 2/2 passed, 1.091x over all 2"
    assert "3 passing scenario(s) have no ratio against leader #7 and are not counted" in chips["all"].title
    assert view.untimed_note == ("No ratio against leader #7 on 3 of 10 passing scenarios (first prefill-d128-s5120: "
                                 "leader #7 returned cudaErrorInvalidValue (1)): the ratio covers the other 7, "
                                 "and no count here includes them.")
    # In a re-time the harness's "baseline" is the leader: the row's flag names it.
    assert view.flag_words(UNTIMED) == "leader #7 not timed: leader #7 returned cudaErrorInvalidValue (1)"
    suite = evaluation_view(evaluation(retime_report(), "suite", "baseline"))
    assert suite.flag_words(UNTIMED) == UNTIMED and "the baseline returned" in suite.untimed_note
    assert not view.fully_timed
    assert retime_words(evaluation(retime_report())) == view.headline


def test_no_chip_claims_a_scenario_that_was_not_timed() -> None:
    """Whatever was left untimed, every count a chip shows is at most the scenarios timed."""
    for untimed in ((), (0,), (4, 5, 6), (8, 9), tuple(range(10))):
        view = evaluation_view(evaluation(retime_report(untimed)))
        timed = 10 - len(untimed)
        all_chip = next(c for c in view.chips if c.part == "all")
        if timed == 10:
            assert all_chip.text == "all: 10/10 passed, 1.091x over all 10" and not all_chip.partial
            assert view.headline == "re-time vs leader #7: all 10 scenarios timed, 1.091x" and not view.untimed_note
        elif timed == 0:
            assert all_chip.text == "all: 10/10 passed; none timed against leader #7, no ratio"
            assert view.headline == "re-time vs leader #7: no scenario timed on both sides, no ratio"
        else:
            assert f"{timed} of 10 timed against leader #7, 1.091x over those {timed}" in all_chip.text
            assert all_chip.partial and f"No ratio against leader #7 on {len(untimed)} of 10" in view.untimed_note


def test_the_comparison_point_of_old_and_new_labels() -> None:
    assert comparison_point("suite", "baseline") == "the baseline"
    assert comparison_point("retime", "leader candidate-7") == "leader #7"  # stored before "leader #N"
    assert comparison_point("retime", "leader #7") == "leader #7"
    assert comparison_point("retime", "campaign leader: session 3 #4") == "campaign leader: session 3 #4"
    assert comparison_point("retime", "") == "the previous leader"
    suite = evaluation_view(evaluation(retime_report(()), "suite", "baseline"))
    assert suite.column == "x baseline" and suite.headline == "vs the baseline: all 10 scenarios timed, 1.091x"


def test_every_ratio_column_says_which_way_it_goes_and_names_the_peers() -> None:
    assert ratio_help("FA3").startswith("x FA3 = FA3 time / this kernel's time, per scenario; above 1 is faster "
                                        "than FA3")
    assert ratio_help("the baseline").startswith("x baseline = baseline time / this kernel's time")
    view = evaluation_view(evaluation(retime_report()))
    assert [(c.name, c.label) for c in view.peers] == [("cudnn", "cuDNN"), ("flash", "FA2"), ("fa3", "FA3")]
    fa3 = view.peers[2]
    assert fa3.help == ratio_help("FA3") and fa3.summary == "0.700x over 6 of 10"  # timed on the 6 prefill ones
    assert view.column_help == ratio_help("leader #7")


def test_tflops_and_gbps_carry_their_share_of_the_measured_roofline() -> None:
    raw = retime_report()
    view = evaluation_view(evaluation(raw))
    assert (view.matrix_tflops, view.copy_gbps) == (MATRIX_TFLOPS, COPY_GBPS)
    profile = profile_report(EvaluationReport.from_dict(raw))  # the one arithmetic, harness/profile.py
    for row in profile.scenarios:
        shown = view.roofline[row.scenario]
        assert shown.tensor_pct == pytest.approx(row.tensor_pct)
        assert shown.bandwidth_pct == pytest.approx(row.bandwidth_pct)
    first = view.roofline["prefill-d128-s1024"]
    assert first.tensor_pct == pytest.approx(320.0 / MATRIX_TFLOPS * 100) and first.bound == "compute"
    assert "% of the 640 TFLOP/s matrix rate" in view.tflops_help()
    no_rates = dict(raw, settings={"device": "cuda"})
    bare = evaluation_view(evaluation(no_rates))
    assert bare.roofline == {} and "no measured roofline" in bare.gbps_help()


def test_the_audit_peer_table_holds_every_peer_and_what_could_not_run() -> None:
    raw = retime_report(())
    raw["settings"]["device_info"]["peers_unavailable"] = {"fa4": "not installed"}
    stats = leader_stats(raw)
    assert list(stats.peers) == ["cudnn", "flash", "fa3"] and stats.peers["fa3"].scenarios == 6
    assert stats.unavailable == {"fa4": "not installed"}
    assert stats.gbps_share("decode") == pytest.approx(100 * 2500.0 / COPY_GBPS)  # 5e8 B in 0.2 ms


def test_a_goal_never_claims_scenarios_its_peer_was_not_timed_on() -> None:
    rep = EvaluationReport.from_dict(retime_report(()))
    assert check(rep, "vs_baseline", 1.05).reason == "1.091x >= 1.05x on all 10 scenarios"
    fa3 = check(rep, "vs_fa3", 0.5)
    assert fa3.reason == "0.700x >= 0.5x over the 6 of 10 scenarios where both were timed"


def test_an_unreadable_report_draws_without_numbers() -> None:
    view = evaluation_view(evaluation({"scenarios": "nonsense"}))
    assert view.report is None and view.chips == [] and view.point == "leader #7"
