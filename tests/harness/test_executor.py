"""The executor's isolation and the evaluation pipeline, on the CPU backend: kernels written
in Python (tests/cpu_kernels.py) run in spawned worker processes exactly as compiled kernels
do on a GPU, so poisoning, trials, determinism, tolerance, crashes and hangs are all real."""

from __future__ import annotations

import glob
import os
import uuid
from pathlib import Path

import pytest

from harness.executor import LocalExecutor, Progress, remove_shared_memory
from harness.job import KernelSpec, WorkerJob
from harness.report import CRASH, ERROR, FAIL, PASS, SKIPPED, TIMEOUT, UNSUPPORTED
from harness.scenario import Scenario
from harness.settings import EvalSettings
from tests.cpu_kernels import SHM_TAG_ENV
from tests.harness.support import FAST, SCENARIOS


def run(fn: str, scenarios: list[Scenario] = SCENARIOS, baseline: str = "correct_slow",
        **settings: object) -> list:  # type: ignore[type-arg]
    opts: dict[str, object] = {"device": "cpu", "peers": (), "timing": FAST}
    opts.update(settings)
    job = WorkerJob(
        "attention-forward",
        KernelSpec(fn, "python", f"tests.cpu_kernels:{fn}"),
        KernelSpec("baseline", "python", f"tests.cpu_kernels:{baseline}"),
        scenarios,
        EvalSettings(**opts),  # type: ignore[arg-type]
    )
    return LocalExecutor().run(job).results


def test_correct_kernel_passes_with_timings_and_speedups() -> None:
    results = run("correct", baseline="correct_30ms")
    assert [r.status for r in results] == [PASS, PASS, PASS]
    for r in results:
        assert r.max_error is not None and r.tolerance is not None
        assert r.max_error <= r.tolerance
        assert r.time_ms and r.time_ms > 0 and r.reps >= 3
        assert r.baseline_ms and r.speedup_vs_baseline and r.speedup_vs_baseline > 1.0
        assert r.tflops and r.tflops > 0


def test_kernel_that_writes_only_the_first_rows_fails_where_rows_exceed_them() -> None:
    results = run("missing_tail")
    assert [r.status for r in results] == [FAIL, PASS, FAIL]
    assert "NaN (the poison value" in results[0].reason


def test_wrong_causal_offset_fails_only_non_square_causal_shapes() -> None:
    results = run("wrong_causal_offset")
    assert [r.status for r in results] == [PASS, FAIL, PASS]
    assert "tolerance" in results[1].reason


def test_low_precision_accumulation_is_caught_by_the_2x_rule() -> None:
    assert all(r.status == FAIL and "tolerance" in r.reason for r in run("low_precision"))


def test_nondeterministic_kernel_is_rejected() -> None:
    results = run("nondeterministic")
    assert all(r.status == FAIL and "non-deterministic" in r.reason for r in results)


def test_kernel_that_modifies_its_inputs_is_rejected() -> None:
    results = run("mutates_input")
    assert all(r.reason == "the kernel modified its input q" for r in results)


def test_not_supported_shape_is_recorded_as_unsupported() -> None:
    results = run("not_supported_d64")
    assert [r.status for r in results] == [UNSUPPORTED, PASS, UNSUPPORTED]


def test_launch_error_is_reported_by_name() -> None:
    results = run("launch_error")
    assert all(r.status == ERROR for r in results)
    assert "cudaErrorInvalidConfiguration (9)" in results[0].reason


def test_output_drift_after_validation_is_caught_by_revalidation() -> None:
    results = run("drifts_after_calls", [SCENARIOS[0]])
    assert results[0].status == FAIL
    assert "changed during the timing loop" in results[0].reason


def test_workspace_arrives_poisoned_before_every_call() -> None:
    assert [r.status for r in run("uses_workspace")] == [PASS, PASS, PASS]


def test_crash_fails_that_scenario_and_evaluation_continues_in_a_new_process() -> None:
    progress: list[Progress] = []
    job_results = run("crash_on_causal")
    assert [r.status for r in job_results] == [CRASH, CRASH, PASS]
    assert "exit code 77" in job_results[0].reason
    assert progress == []


def test_hang_is_killed_at_the_time_limit_and_the_rest_still_runs() -> None:
    results = run("hang_on_causal", scenario_timeout_s=3.0)
    assert [r.status for r in results] == [TIMEOUT, TIMEOUT, PASS]
    assert "3 s limit" in results[0].reason


def test_repeated_crashes_stop_after_max_restarts_with_the_rest_skipped() -> None:
    many = [Scenario(f"c{i}", "x", 1, 8, 8, 1, 1, 32, causal=True) for i in range(5)]
    results = run("crash_on_causal", many, max_restarts=1)
    assert [r.status for r in results] == [CRASH, CRASH, SKIPPED, SKIPPED, SKIPPED]
    assert "crashed or hung the evaluation 2 times" in results[2].reason


def test_a_kernel_that_cannot_be_loaded_fails_every_scenario_with_the_reason() -> None:
    job = WorkerJob(
        "attention-forward", KernelSpec("missing", "library", "/nonexistent/kernel.so"), None,
        SCENARIOS, EvalSettings(device="cpu", peers=(), timing=FAST),
    )
    results = LocalExecutor().run(job).results
    assert all(r.status == ERROR and "could not start" in r.reason for r in results)
    assert "/nonexistent/kernel.so" in results[0].reason


def test_progress_reports_each_scenario_in_order() -> None:
    seen: list[Progress] = []
    job = WorkerJob(
        "attention-forward", KernelSpec("c", "python", "tests.cpu_kernels:correct"), None,
        SCENARIOS, EvalSettings(device="cpu", peers=(), timing=FAST),
    )
    LocalExecutor().run(job, seen.append)
    finished = [p for p in seen if p.result is not None]
    assert [p.done for p in finished] == [1, 2, 3]
    assert [p.scenario for p in finished] == [s.name for s in SCENARIOS]
    assert all(p.total == 3 for p in seen)


def _job(fn: str) -> WorkerJob:
    return WorkerJob(
        "attention-forward", KernelSpec(fn, "python", f"tests.cpu_kernels:{fn}"),
        KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"),
        SCENARIOS, EvalSettings(device="cpu", peers=(), timing=FAST),
    )


def test_a_spare_process_takes_the_next_job_and_no_process_runs_two_jobs() -> None:
    executor = LocalExecutor(spare=True)
    try:
        first = executor.run(_job("correct"))
        second = executor.run(_job("correct"))
        third = executor.run(_job("crash_on_causal"))  # a restart inside a job uses a process too
    finally:
        executor.close()
    assert first.device["spare"] is False  # nothing was warm yet
    assert second.device["spare"] is True and third.device["spare"] is True
    assert len({first.device["pid"], second.device["pid"], third.device["pid"]}) == 3
    assert [r.status for r in second.results] == [PASS, PASS, PASS]
    assert [r.status for r in third.results] == [CRASH, CRASH, PASS]
    assert third.restarts == 2
    # Where the setup time went, for the report: device, kernels, the harness's own kernels
    # (which implementation makes the fresh inputs: torch operations on the CPU), rates,
    # persisting-L2 reset.
    assert set(second.device["setup_phases"]) == {"device", "kernels", "harness_kernels", "rates",
                                                "sandbox_and_candidate", "l2_reset"}
    assert second.device["fresh_inputs"] == "torch operations (CPU backend)"


def test_close_ends_the_spare_process_and_a_closed_executor_still_works() -> None:
    executor = LocalExecutor(spare=True)
    executor.run(_job("correct"))
    assert executor._spare is not None
    proc = executor._spare[0]
    assert proc.is_alive()
    executor.close()
    assert not proc.is_alive() and executor._spare is None
    plain = LocalExecutor()
    again = plain.run(_job("correct"))
    assert again.device["spare"] is False and plain._spare is None


def test_a_prestarted_process_takes_the_job_and_no_new_spare_follows() -> None:
    """evaluate_source starts the worker before nvcc runs (LocalExecutor.prestart): the job
    goes to that process, and an executor without spare=True keeps no process afterwards."""
    executor = LocalExecutor()
    executor.prestart()
    assert executor._spare is not None
    proc = executor._spare[0]
    executor.prestart()  # already started: the same process
    assert executor._spare[0] is proc
    try:
        result = executor.run(_job("correct"))
    finally:
        executor.close()
    assert result.device["spare"] is True and result.device["pid"] == proc.pid
    assert [r.status for r in result.results] == [PASS, PASS, PASS]
    assert executor._spare is None


def test_a_prestarted_process_told_to_warm_up_prepares_then_runs_the_job() -> None:
    """The CLI tells its prestarted worker that the GPU is its evaluation's
    (LocalExecutor.warm): the process makes its device before the job and reports the warm-up;
    the job's results are those of any worker. A spare never told reports none."""
    executor = LocalExecutor()
    assert not executor.warm("attention-forward", SCENARIOS, _job("correct").settings)  # no spare
    executor.prestart()
    assert executor._spare is not None
    pid = executor._spare[0].pid
    try:
        assert executor.warm("attention-forward", SCENARIOS, _job("correct").settings)
        result = executor.run(_job("correct"))
    finally:
        executor.close()
    assert result.device["pid"] == pid
    assert result.device["warm_up"]["seconds"] >= 0
    assert result.device["warm_up"]["scenarios_with_plans"] == 0  # the CPU backend has no peers
    assert [r.status for r in result.results] == [PASS, PASS, PASS]
    spare = LocalExecutor(spare=True)
    try:
        spare.run(_job("correct"))
        untold = spare.run(_job("correct"))
    finally:
        spare.close()
    assert untold.device["spare"] is True and "warm_up" not in untold.device


def test_a_dead_spare_is_replaced_by_a_fresh_process() -> None:
    executor = LocalExecutor(spare=True)
    try:
        executor.run(_job("correct"))
        assert executor._spare is not None
        executor._spare[0].kill()
        executor._spare[0].join(5)
        result = executor.run(_job("correct"))
    finally:
        executor.close()
    assert result.device["spare"] is False
    assert [r.status for r in result.results] == [PASS, PASS, PASS]


def test_scenario_phases_say_where_the_time_went_with_and_without_integrity_checks() -> None:
    on = run("correct")
    off = run("correct", integrity=False)
    for r in on:
        assert {"correctness", "reference", "timing", "integrity"} <= set(r.phases), r.phases
        assert "peers" not in r.phases and "profile" not in r.phases  # no peers on the CPU, no profiler
    for r in off:
        assert "integrity" not in r.phases and "timing" in r.phases


def test_what_a_worker_leaves_in_shared_memory_is_removed_when_the_job_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker is killed after its job, or leaves without destructors: the shared memory torch
    made in it under its pid (on a GPU, the answer-key arena's reference counts) is removed by
    the executor, and no other process's."""
    tag = f"socratic-test-{uuid.uuid4().hex}"
    monkeypatch.setenv(SHM_TAG_ENV, tag)
    mine = Path(f"/dev/shm/torch_{os.getpid()}_{tag}")  # this process's: alive, not the job's
    mine.write_bytes(b"")
    try:
        results = run("leaves_shared_memory", hardening=False)
        assert [r.status for r in results] == [PASS] * len(SCENARIOS)
        assert glob.glob(f"/dev/shm/torch_*_{tag}") == [str(mine)]
    finally:
        mine.unlink(missing_ok=True)


def test_only_the_named_processes_shared_memory_files_are_removed(tmp_path: Path) -> None:
    for name in ("torch_123_9_0", "torch_123_8_1", "torch_1234_7_0", "torch_12_6_0", "other_123_1"):
        (tmp_path / name).write_bytes(b"")
    assert sorted(remove_shared_memory([123], str(tmp_path))) == ["torch_123_8_1", "torch_123_9_0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other_123_1", "torch_1234_7_0", "torch_12_6_0"]
    assert remove_shared_memory([123], str(tmp_path)) == []
