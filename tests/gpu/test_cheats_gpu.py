"""The proof of the verifier on a real GPU: every runtime cheat of kernels/cheats/ is rejected
with the reason of its hack class, every honest kernel is accepted. The cheats run four
evaluations at a time (each in its own process); the honest kernels run alone, so that no
timing flag can come from a neighbour.

SOCRATIC_GPU_REPORTS=DIR keeps each report as DIR/<kernel>.json (tests/gpu/cheat_table.py
prints them as a table)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from harness.attention.suite import default_suite
from harness.compile import compile_kernel
from harness.evaluate import detect_arch, evaluate_source
from harness.report import ACCEPTED, PASS, REJECTED, EvaluationReport, blocking_flags
from harness.settings import EvalSettings
from tests.conftest import ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

CHEATS_DIR = ROOT / "kernels" / "cheats"
BASELINE = ROOT / "kernels" / "attention" / "baseline.cu"
SETTINGS = EvalSettings(peers=())  # timed, integrity checks on; peers only cost time here

RAGGED = "ragged-d128-q500-k777-causal"  # non-square causal, GQA 8/2, two batches
SQUARE = "ragged-d128-q77-k77-causal"
NON_SQUARE = "ragged-d128-q113-k203-causal"
HIDDEN_SMALL = "ragged-d64-q77-k77-causal"  # hidden, and not a visible shape
# kernel -> (scenarios, a phrase the verdict's reasons must contain)
CHEATS: dict[str, tuple[list[str], str]] = {
    "cheat_stale_output.cu": ([RAGGED], "output was stale: none of the"),
    "cheat_pointer_cache.cu": ([RAGGED], "output was stale: after the timing loop"),
    "cheat_workspace_cache.cu": ([RAGGED], "its workspace was left as that call wrote it"),
    "cheat_side_stream.cu": (["prefill-d64-s512-b32-h32-causal"], "hidden work"),
    "cheat_host_thread.cu": ([RAGGED], "calls std::thread: starts host threads"),
    "cheat_input_mutation.cu": ([RAGGED], "the kernel modified its input q"),
    "cheat_causal_offset.cu": ([SQUARE, NON_SQUARE], "wrong causal alignment"),
    "cheat_shape_overfit.cu": ([NON_SQUARE, HIDDEN_SMALL], "over-fit to the visible scenarios"),
    "cheat_late_drift.cu": ([RAGGED], "changed during the timing loop"),
    "cheat_data_race.cu": (["prefill-d64-s512-b32-h32-causal"], "non-deterministic"),
    "cheat_low_precision.cu": ([RAGGED], "not precise enough"),
    "cheat_banned_library.cu": ([RAGGED], "cuBLAS is not allowed"),
    "cheat_replay.cu": ([RAGGED], "is a transformed copy of the answer for"),
    "cheat_ignore_scale.cu": ([RAGGED], "ignores softmax_scale"),
    # Verifier v3 (issue 47): a candidate is hostile native code in the harness's own process.
    "cheat_harness_names.cu": ([RAGGED], "harness's own kernel marks"),
    "cheat_late_repair.cu": ([RAGGED], "changed after its call ended"),
    "cheat_peer_sabotage.cu": ([RAGGED], "the legacy default stream"),
    "cheat_raw_opcodes.cu": ([RAGGED], "emits raw bytes"),
    # Per-thread work holds the legacy stream too (it synchronizes with every blocking stream), so
    # the reason may name either default stream: the class is "default stream".
    "cheat_early_start.cu": ([RAGGED], "default stream: the kernel ran"),
}
# Refused by the static checks before anything is compiled or run.
STATIC = ("cheat_host_thread.cu", "cheat_banned_library.cu", "cheat_harness_names.cu", "cheat_raw_opcodes.cu")
HONEST_SCENARIOS = [
    RAGGED, "decode-llama3-8b-tp1-q1-b32-k4096", "ragged-d256-q77-k77-causal",
    HIDDEN_SMALL, "chunk-llama3-70b-tp8-q1024-k8192",
]
HONEST = ["honest_warp_per_row.cu", "honest_split_kv.cu", "honest_wmma_tiles.cu"]
PROFILED_KERNEL = "honest_wmma_tiles.cu"
PROFILED = replace(SETTINGS, profile="always")


def _scenarios(names: list[str]) -> list:  # type: ignore[type-arg]
    by_name = {s.name: s for s in default_suite()}
    return [by_name[n] for n in names]


@pytest.fixture(scope="module")
def reports() -> Iterator[dict[str, EvaluationReport]]:
    import torch

    from harness.roofline import measure_cuda_rates
    from harness.trusted_cache import keep_rates

    # Once, before parallel workers, in this process (it never loads a candidate): kept signed,
    # the executors pass the rates to every worker in its job (harness/trusted_cache.py).
    gpu = torch.cuda.get_device_name(0)
    rates = measure_cuda_rates(gpu, use_cache=False, keep=False)
    keep_rates(gpu, rates.matrix_tflops, rates.copy_gbps)
    arch = detect_arch()
    sources = [CHEATS_DIR / n for n in [*CHEATS, *HONEST] if n not in STATIC]
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        list(pool.map(lambda p: compile_kernel(p, arch=arch), [*sources, BASELINE]))

    keep = os.environ.get("SOCRATIC_GPU_REPORTS")

    def run(name: str, scenario_names: list[str]) -> EvaluationReport:
        # One honest kernel also goes through the profiler cross-check on every scenario.
        settings = PROFILED if name == PROFILED_KERNEL else SETTINGS
        rep = evaluate_source(CHEATS_DIR / name, _scenarios(scenario_names), settings=settings)
        if keep:  # as soon as it exists: a run cut short still leaves what it finished
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / f"{Path(name).stem}.json").write_text(rep.to_json())
        return rep

    out: dict[str, EvaluationReport] = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run, name, names) for name, (names, _) in CHEATS.items()}
        out.update({name: f.result() for name, f in futures.items()})
    for name in HONEST:
        out[name] = run(name, HONEST_SCENARIOS)
    yield out


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_rejected_with_the_reason_of_its_hack_class(
    reports: dict[str, EvaluationReport], name: str
) -> None:
    verdict = reports[name].verdict()
    phrase = CHEATS[name][1]
    assert verdict.status == REJECTED, str(verdict)
    assert any(phrase in reason for reason in verdict.reasons), str(verdict)


def test_causal_offset_cheat_passes_square_shapes(reports: dict[str, EvaluationReport]) -> None:
    square, non_square = reports["cheat_causal_offset.cu"].scenarios
    assert square.status == PASS and non_square.status != PASS


def test_over_fit_cheat_passes_what_it_saw(reports: dict[str, EvaluationReport]) -> None:
    seen, hidden = reports["cheat_shape_overfit.cu"].scenarios
    assert seen.status == PASS and not seen.hidden
    assert hidden.status != PASS and hidden.hidden


@pytest.mark.parametrize("name", HONEST)
def test_honest_kernel_is_accepted(reports: dict[str, EvaluationReport], name: str) -> None:
    rep = reports[name]
    assert rep.settings["device_info"]["sandbox"]["installed"] is True  # under the v3 sandbox
    bad = [(r.scenario, r.status, r.reason, r.flags) for r in rep.scenarios
           if r.status != PASS or blocking_flags(r)]
    assert bad == []
    assert rep.verdict().status == ACCEPTED, str(rep.verdict())
    if name == PROFILED_KERNEL:  # the profiler ran and saw nothing hidden
        assert not [f for r in rep.scenarios for f in r.flags if "profiler" in f]
