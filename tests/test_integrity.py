"""The timed phase's integrity checks on the CPU backend: fresh contents rotated through the
timing loop and re-validated, the workspace probe, failure diagnoses, and the decisions of the
hidden-work and persisting-L2 checks (whose measurements need a GPU) from given numbers."""

from __future__ import annotations

import torch

from harness.attention.fresh import FACTORS, AttentionVersions
from harness.attention.problem import AttentionForward
from harness.device import KernelActivity
from harness.executor import LocalExecutor
from harness.integrity import (
    persisting_l2_reason,
    profile_reason,
    summarize_activity,
    tail_reason,
)
from harness.problem import KernelSpec
from harness.report import FAIL, PASS, ScenarioResult
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.worker import WorkerJob
from tests.cpu_kernels import _exact
from tests.test_executor import FAST, SCENARIOS

CPU = torch.device("cpu")
GQA = Scenario("gqa", "x", 2, 33, 47, 8, 2, 32, causal=True)


def run(
    fn: str, scenarios: list[Scenario] = SCENARIOS, module: str = "tests.cpu_kernels",
    **settings: object,
) -> list[ScenarioResult]:
    opts: dict[str, object] = {"device": "cpu", "peers": (), "timing": FAST}
    opts.update(settings)
    job = WorkerJob(
        "attention-forward", KernelSpec(fn, "python", f"{module}:{fn}"),
        KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"), scenarios,
        EvalSettings(**opts),  # type: ignore[arg-type]
    )
    return LocalExecutor().run(job).results


def _set(s: Scenario, seed: int) -> tuple[list[torch.Tensor], object, AttentionVersions]:
    problem = AttentionForward()
    inputs = problem.make_inputs(s, seed, CPU)
    bufs = problem.buffers(s, inputs, problem.new_output(s, CPU), None)
    bufs.o.copy_(_exact(bufs))
    return inputs, bufs, AttentionVersions(s, inputs, bufs.o, seed=seed, count=6)


def test_every_fresh_version_has_the_exact_answer_the_harness_predicts() -> None:
    for seed in (0, 1):  # seed 1 stores K and V interleaved in one buffer
        _, bufs, versions = _set(GQA, seed)
        for _ in range(8):  # more than planned: the sequence starts over
            versions.advance()
            assert torch.equal(_exact(bufs), versions.expected(versions.history[-1]))


def test_consecutive_versions_change_every_element_of_v() -> None:
    inputs, _, versions = _set(GQA, 0)
    v = inputs[2]
    before = v.clone()
    for _ in range(5):
        versions.advance()
        changed = v != before
        assert bool(changed[before != 0].all())
        before = v.clone()
    assert all(abs(f) in (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0) for f in FACTORS)


def test_the_probe_changes_one_block_that_is_not_the_first_and_predicts_its_answer() -> None:
    inputs, bufs, versions = _set(GQA, 0)
    versions.advance()
    v_before = inputs[2].clone()
    expected = versions.probe()
    changed = (inputs[2] != v_before).any(dim=(1, 3))  # [batch, kv head]
    assert int(changed.sum()) == 1 and not bool(changed[0, 0])
    assert torch.equal(_exact(bufs), expected)


def test_pointer_keyed_cache_is_rejected_as_stale() -> None:
    results = run("pointer_cache", module="tests.cpu_cheats")
    assert all(r.status == FAIL for r in results)
    assert results[0].reason.startswith("output was stale: after the timing loop")
    assert "the contents validated before timing" in results[0].reason


def test_cache_keyed_on_sampled_q_and_k_is_rejected_as_stale() -> None:
    results = run("sampled_qk_cache", module="tests.cpu_cheats")
    assert all(r.status == FAIL and r.reason.startswith("output was stale") for r in results)


def test_cache_kept_in_the_workspace_is_caught_by_the_workspace_probe() -> None:
    results = run("workspace_cache", module="tests.cpu_cheats")
    # The probe changes a block other than the one the cache samples when there are several.
    assert [r.status for r in results] == [FAIL, PASS, FAIL]
    assert "its workspace was left as that call wrote it" in results[0].reason


def test_without_the_integrity_checks_a_pointer_cache_would_pass() -> None:
    """What the checks buy: the old loop (unchanged contents) cannot see the cache."""
    results = run("pointer_cache", module="tests.cpu_cheats", integrity=False)
    assert all(r.status == PASS for r in results)


def test_output_that_was_never_written_is_called_stale() -> None:
    results = run("writes_nothing", module="tests.cpu_cheats")
    assert all(r.status == FAIL for r in results)
    assert "output was stale: none of the" in results[0].reason


def test_low_precision_is_named_as_such() -> None:
    results = run("low_precision")
    assert all("not precise enough" in r.reason or "wrong result" in r.reason for r in results)
    assert any("not precise enough" in r.reason for r in results)


def test_top_left_causal_alignment_is_named_as_such() -> None:
    results = run("wrong_causal_offset", [SCENARIOS[1]])
    assert results[0].reason.startswith("trial 1: wrong causal alignment")
    assert "tolerance" in results[0].reason


def test_device_synchronized_tail_decides_hidden_work() -> None:
    assert tail_reason([(1.0, 0.01), (1.1, 0.02), (0.9, 0.0)]) is None
    why = tail_reason([(0.02, 3.0), (0.02, 2.9), (0.03, 3.1)])
    assert why is not None and why.startswith("hidden work: the device stayed busy 3.000 ms")


def _kernel(name: str, stream: int, ms: float, harness: bool = False) -> KernelActivity:
    return KernelActivity(name=name, stream=stream, ms=ms, harness=harness)


def test_profiler_names_kernels_on_another_stream() -> None:
    fill = _kernel("void at::native::vectorized_elementwise_kernel<FillFunctor>", 7, 0.01, True)
    honest = [fill, _kernel("attn", 7, 1.0), fill, _kernel("attn", 7, 1.0)]
    assert profile_reason(summarize_activity(honest, 2), event_ms=1.0) is None
    side = [fill, _kernel("attn", 13, 1.0), fill, _kernel("attn", 13, 1.0)]
    why = profile_reason(summarize_activity(side, 2), event_ms=0.01)
    assert why is not None and "2 kernel(s)" in why and "another stream" in why


def test_profiler_compares_kernel_time_with_the_events() -> None:
    many = [_kernel("attn", 7, 2.0, False), _kernel("fill", 7, 0.0, True)]
    why = profile_reason(summarize_activity(many, 1), event_ms=0.5)
    assert why is not None and "2.000 ms" in why and "0.500 ms" in why


def test_persisting_l2_left_set_aside_is_a_failure() -> None:
    assert persisting_l2_reason(0, "before timing") is None
    assert persisting_l2_reason(-1, "before timing") is None
    why = persisting_l2_reason(4 << 20, "after timing")
    assert why is not None and "4194304 bytes" in why and "survive the harness's cache flush" in why


def test_profiler_runs_for_every_flag_and_for_one_large_win_per_process() -> None:
    from harness.device import CpuDevice
    from harness.worker import ScenarioEvaluator

    ev = ScenarioEvaluator(
        AttentionForward(), CpuDevice(), None, None, EvalSettings(device="cuda"), None,  # type: ignore[arg-type]
    )
    flagged = ScenarioResult("f", "x", False, PASS, flags=["impossible: 9x"])
    assert ev._wants_profile(flagged) and ev._wants_profile(flagged)
    modest = ScenarioResult("m", "x", False, PASS, speedup_vs_peers={"cudnn": 0.8, "flash": 3.0})
    assert not ev._wants_profile(modest)
    win = ScenarioResult("w", "x", False, PASS, speedup_vs_peers={"cudnn": 2.5, "flash": 4.0})
    assert ev._wants_profile(win) and not ev._wants_profile(win)


def test_a_100x_flag_confirmed_by_the_profiler_becomes_a_non_blocking_note() -> None:
    from harness.integrity import reverified_flags
    from harness.report import BLOCKING_FLAG_PREFIXES

    flags = ["impossible: 150x over the baseline (limit 100x)"]
    out = reverified_flags(flags)
    assert out == [
        "re-verified: 150x over the baseline (limit 100x) held: the profiler's kernel durations "
        "match the timer and the time is above the roofline floor"
    ]
    assert not any(f.startswith(BLOCKING_FLAG_PREFIXES) for f in out)


def test_a_roofline_flag_keeps_every_flag_blocking() -> None:
    from harness.integrity import reverified_flags

    flags = [
        "impossible: 0.0010 ms is under the roofline floor 0.0200 ms",
        "impossible: 900x over the baseline (limit 100x)",
    ]
    assert reverified_flags(flags) == flags
