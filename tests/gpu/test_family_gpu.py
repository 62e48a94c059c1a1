"""Rendered family kernels pass a subset of the suite through the real harness (needs a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.attention.suite import default_suite
from harness.evaluate import evaluate_source
from harness.settings import EvalSettings
from kernels.attention.family import default_knobs, render
from kernels.attention.family.space import covering_sample

SCENARIOS = (
    "prefill-d64-s512-b32-h32-causal",
    "prefill-d128-s1024-b16-h16-full",
    "gqa-gemma2-9b-tp8-s4096-b2-causal",
    "chunk-llama3-70b-tp8-q256-k8192",
    "decode-llama3-8b-tp1-q4-b1-k32768",
    "decode-gemma2-9b-tp1-q1-b128-k1024",
    "ragged-d128-q113-k203-causal",
    "ragged-d256-q239-k1-full",
)


@pytest.mark.gpu
@pytest.mark.parametrize("which", [0, 1, 2])
def test_family_kernels_pass_a_subset(which: int, tmp_path: Path) -> None:
    knobs = [default_knobs(), *covering_sample()[1:3]][which]
    src = tmp_path / f"family_{which}.cu"
    src.write_text(render(knobs))
    chosen = [s for s in default_suite() if s.name in SCENARIOS]
    assert len(chosen) == len(SCENARIOS)
    report = evaluate_source(src, chosen, settings=EvalSettings(measure=False, peers=()))
    assert report.compile.ok, report.compile.log[-2000:]
    bad = [(s.scenario, s.status, s.reason) for s in report.scenarios if not s.passed]
    assert not bad, (knobs.slug(), bad)
