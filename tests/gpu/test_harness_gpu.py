"""The harness on a real GPU: the baseline passes every scenario, and kernels with a planted
bug fail exactly the scenarios they should (and nothing else)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.attention.suite import default_suite
from harness.evaluate import evaluate_source
from harness.report import PASS
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.suite import select
from tests.conftest import ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

BASELINE = ROOT / "kernels" / "attention" / "baseline.cu"
CORRECTNESS_ONLY = EvalSettings(measure=False, peers=())


def planted(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = BASELINE.read_text()
    assert old in text, f"the baseline changed; update the planted bug {name}"
    path = tmp_path / f"{name}.cu"
    path.write_text(text.replace(old, new))
    return path


def failing(report_scenarios: list) -> set[str]:  # type: ignore[type-arg]
    return {r.scenario for r in report_scenarios if r.status != PASS}


def test_baseline_passes_all_182_scenarios() -> None:
    report = evaluate_source(BASELINE, default_suite(), settings=CORRECTNESS_ONLY)
    bad = [(r.scenario, r.status, r.reason) for r in report.scenarios if r.status != PASS]
    assert bad == []
    assert len(report.scenarios) == 182


def test_wrong_causal_offset_fails_exactly_the_non_square_causal_scenarios(tmp_path: Path) -> None:
    kernel = planted(tmp_path, "top_left_causal", "const int offset = sk - sq;", "const int offset = 0;")
    report = evaluate_source(kernel, default_suite(), settings=CORRECTNESS_ONLY)
    expected = {s.name for s in default_suite() if s.causal and s.seqlen_q != s.seqlen_k}
    assert expected  # chunked prefill and decode
    assert failing(report.scenarios) == expected


def _block_m(s: Scenario) -> int:
    return 32 if s.head_dim == 256 else 64


def test_missing_tail_fails_exactly_the_ragged_query_lengths(tmp_path: Path) -> None:
    kernel = planted(
        tmp_path, "missing_tail",
        "const dim3 grid((a->seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM,",
        "const dim3 grid(a->seqlen_q / Cfg::kBlockM,",
    )
    report = evaluate_source(kernel, default_suite(), settings=CORRECTNESS_ONLY)
    expected = {s.name for s in default_suite() if s.seqlen_q % _block_m(s)}
    assert failing(report.scenarios) == expected


def test_timed_evaluation_reports_speedups_and_peers() -> None:
    chosen = select(default_suite(), "all", "prefill-d128-s4096-b4-h16-causal")
    chosen += select(default_suite(), "all", "decode-llama3-8b-tp1-q1-b32-k4096")
    report = evaluate_source(BASELINE, chosen, settings=EvalSettings())
    for r in report.scenarios:
        assert r.status == PASS, r.reason
        assert r.time_ms and r.time_ms > 0 and r.reps >= 3
        assert r.speedup_vs_baseline is not None and 0.7 < r.speedup_vs_baseline < 1.4
        assert r.peers["cudnn"].status in ("ok", "unsupported")
        assert r.peers["flash"].status in ("ok", "unsupported")
    prefill = report.scenarios[0]
    assert prefill.peers["cudnn"].status == "ok"
    assert prefill.speedup_vs_peers["cudnn"] < 1.0  # the baseline is a CUDA-core kernel
