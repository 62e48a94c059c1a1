"""The baseline cache (harness/peer_cache.py: BaselineCache): the naive baseline's time is kept
per GPU, software, scenario shape, baseline code and timing settings; a later evaluation neither
runs nor times the baseline, marks the time as cached, and still times the candidate."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from harness.evaluate import fill_baseline_cache
from harness.executor import LocalExecutor, Progress
from harness.job import KernelSpec, WorkerJob
from harness.peer_cache import BaselineCache, baseline_key
from harness.report import PASS, CompileInfo, EvaluationReport, ScenarioResult, render_geomeans
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.timing import TimingSettings
from harness.worker import kernel_digest

H200 = {"name": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "torch": "2.11.0+cu130",
        "cuda": "13.0", "cudnn": 91900, "driver": "580.159.04", "pid": 1}
SHAPE = Scenario("prefill-a", "prefill", 2, 1024, 1024, 16, 16, 128, causal=True)
LIB = "a" * 64
FAST = TimingSettings(budget_ms=2, min_reps=3, min_reps_slow=3, max_reps=5, wall_reps=2)


def key(device: dict[str, object] = H200, lib: str = LIB, s: Scenario = SHAPE,
        settings: EvalSettings | None = None) -> str:
    return baseline_key(dict(device), lib, s, settings or EvalSettings())


def test_the_key_changes_with_the_gpu_the_software_the_scenario_the_baseline_and_the_timing() -> None:
    base = key()
    others = [
        key(device={**H200, "name": "NVIDIA H100 80GB HBM3"}),
        key(device={**H200, "sm_count": 114}),
        key(device={**H200, "torch": "2.12.0"}),
        key(device={**H200, "cuda": "13.1"}),
        key(device={**H200, "cudnn": 92000}),
        key(device={**H200, "driver": "580.160.01"}),
        key(lib="b" * 64),
        key(s=dataclasses.replace(SHAPE, seqlen_k=2048)),
        key(s=dataclasses.replace(SHAPE, causal=False)),
        key(s=dataclasses.replace(SHAPE, heads_kv=4)),
        key(settings=EvalSettings(timing=TimingSettings(budget_ms=20.0))),
        key(settings=EvalSettings(timing=TimingSettings(max_lead_ms=1.0))),
        key(settings=EvalSettings(trials=3)),
        key(settings=EvalSettings(seed=5)),
    ]
    assert base not in others and len(set(others)) == len(others)
    # The scenario's name, category and visibility, the worker's pid: the same entry.
    assert key(s=dataclasses.replace(SHAPE, name="x", hidden=True, category="y")) == base
    assert key(device={**H200, "pid": 999}) == base


def test_an_entry_is_found_until_it_is_too_old_and_never_for_another_library(tmp_path: Path) -> None:
    c = BaselineCache(tmp_path, 3600.0, dict(H200), EvalSettings(), LIB)
    assert c.get(SHAPE) is None
    c.put(SHAPE, 2.5, 0.01, 10)
    c.put(dataclasses.replace(SHAPE, seqlen_q=7), 0.0, 0.0, 0)  # no time: not kept
    hit = c.get(SHAPE)
    assert hit is not None and (hit.median_ms, hit.spread, hit.reps) == (2.5, 0.01, 10)
    assert hit.measured_at <= time.time()
    assert c.get(SHAPE, now=time.time() + 3700) is None
    assert BaselineCache(tmp_path, 3600.0, dict(H200), EvalSettings(), "b" * 64).get(SHAPE) is None
    (entry,) = tmp_path.glob("*.json")
    entry.write_text("{broken")
    assert c.get(SHAPE) is None


def test_the_digest_of_a_baseline_follows_its_code(tmp_path: Path) -> None:
    lib = tmp_path / "kernel.so"
    lib.write_bytes(b"\x7fELF one")
    first = kernel_digest(KernelSpec("baseline", "library", str(lib)))
    lib.write_bytes(b"\x7fELF two")
    assert kernel_digest(KernelSpec("baseline", "library", str(lib))) != first
    slow = kernel_digest(KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"))
    other = kernel_digest(KernelSpec("baseline", "python", "tests.cpu_kernels:correct_30ms"))
    assert slow != other


SCENARIOS = [
    Scenario("small-causal", "prefill", 1, 77, 77, 4, 2, 64, causal=True),
    Scenario("bottom-right", "chunked", 1, 40, 130, 4, 1, 32, causal=True, hidden=True),
]


def evaluate(folder: Path, baseline: str = "correct_30ms", use_cache: bool = True) -> EvaluationReport:
    settings = EvalSettings(device="cpu", peers=(), timing=FAST, baseline_cache=use_cache,
                            baseline_cache_dir=str(folder))
    job = WorkerJob("attention-forward", KernelSpec("k", "python", "tests.cpu_kernels:correct"),
                    KernelSpec("baseline", "python", f"tests.cpu_kernels:{baseline}"),
                    SCENARIOS, settings)
    executor = LocalExecutor()
    result = executor.run(job)
    # The candidate's process wrote nothing; what evaluate_source does next fills the cache from
    # a process that evaluates the baseline alone.
    written_by_candidate = len(list(folder.glob("baseline-*.json")))
    told: list[Progress] = []
    fill_baseline_cache(job, result.results, executor, None, told.append)
    assert all(p.message.startswith("filling the baseline cache") and p.result is None for p in told)
    report = EvaluationReport("k", "baseline", "cpu", "all", result.results, CompileInfo(ok=True))
    report.settings["entries_before_fill"] = written_by_candidate
    report.settings["fill_progress"] = len(told)
    return report


def stored_medians(folder: Path) -> dict[str, float]:
    return {d["entry"]["scenario"]: d["entry"]["median_ms"]
            for d in (json.loads(f.read_text()) for f in folder.glob("baseline-*.json"))}


def test_a_second_evaluation_takes_the_baseline_time_from_the_cache_and_says_so(tmp_path: Path) -> None:
    first = evaluate(tmp_path)
    assert [r.status for r in first.scenarios] == [PASS, PASS]
    assert all(r.baseline_cached_at is None and r.baseline_ms and r.baseline_ms >= 30
               for r in first.scenarios)
    assert first.cached_baseline_note() is None
    assert first.settings["entries_before_fill"] == 0  # never written beside a candidate
    assert first.settings["fill_progress"] > 0  # the fill shows progress
    assert len(list(tmp_path.glob("baseline-*.json"))) == 2
    stored = stored_medians(tmp_path)
    assert all(v >= 30 for v in stored.values())

    t0 = time.monotonic()
    second = evaluate(tmp_path)
    assert [r.status for r in second.scenarios] == [PASS, PASS]
    for a, b in zip(first.scenarios, second.scenarios, strict=True):
        assert b.baseline_cached_at is not None
        assert b.baseline_ms == stored[a.scenario]  # the stored median, not a new measurement
        assert b.time_ms and b.reps >= 3  # the candidate is still timed
        assert b.speedup_vs_baseline == b.baseline_ms / b.time_ms
    assert second.settings["fill_progress"] == 0  # nothing to fill
    note = second.cached_baseline_note()
    assert note is not None and note.startswith("2 of 2 baseline times came from the baseline cache")
    assert any(line.startswith("note: 2 of 2 baseline times") for line in render_geomeans(second))
    assert time.monotonic() - t0 < 60

    # Another baseline is another entry; asking for a timed baseline ignores the cache.
    other = evaluate(tmp_path, baseline="correct_slow")
    assert all(r.baseline_cached_at is None and r.baseline_ms and r.baseline_ms < 30
               for r in other.scenarios)
    timed = evaluate(tmp_path, use_cache=False)
    assert all(r.baseline_cached_at is None for r in timed.scenarios)


def test_a_report_carries_the_mark_through_json() -> None:
    r = ScenarioResult("s", "prefill", False, PASS, time_ms=1.0, baseline_ms=9.0,
                       speedup_vs_baseline=9.0, baseline_cached_at=1000.0)
    report = EvaluationReport("k", "b", "g", "all", [r], CompileInfo(ok=True))
    again = EvaluationReport.from_dict(json.loads(report.to_json()))
    assert again.scenarios[0].baseline_cached_at == 1000.0
    note = again.cached_baseline_note(now=1000.0 + 7200)
    assert note is not None and "2.0 h earlier" in note and "side by side" in note


def test_only_the_problems_own_baseline_is_cached(tmp_path: Path) -> None:
    """The judge's re-time of a contender against the leader goes through the same call with the
    leader as the baseline: that one must be timed side by side, never taken from a cache."""
    from harness.attention.forward import AttentionForward
    from harness.evaluate import baseline_cache_settings

    naive = AttentionForward.baseline_source
    settings = EvalSettings()
    assert baseline_cache_settings(settings, naive, naive).baseline_cache is True
    leader = tmp_path / "leader.cu"
    leader.write_text(naive.read_text())  # the same code elsewhere is still another kernel file
    assert baseline_cache_settings(settings, leader, naive).baseline_cache is False
    off = EvalSettings(baseline_cache=False)
    assert baseline_cache_settings(off, naive, naive).baseline_cache is False


def test_a_tampered_entry_is_ignored_counted_and_the_baseline_timed_again(tmp_path: Path) -> None:
    """Issue 47, class 4: a kernel rewrote the baseline-time cache to make the baseline 3x slower.
    Entries are signed by the executor's process (harness/trusted_cache.py): a rewritten one is
    ignored, the baseline is timed side by side again, and the device info counts the rejection."""
    evaluate(tmp_path)
    for f in tmp_path.glob("baseline-*.json"):
        d = json.loads(f.read_text())
        d["entry"]["median_ms"] *= 3
        f.write_text(json.dumps(d))
    settings = EvalSettings(device="cpu", peers=(), timing=FAST, baseline_cache_dir=str(tmp_path))
    job = WorkerJob("attention-forward", KernelSpec("k", "python", "tests.cpu_kernels:correct"),
                    KernelSpec("baseline", "python", "tests.cpu_kernels:correct_30ms"), SCENARIOS, settings)
    out = LocalExecutor().run(job)
    assert out.device["cache_rejected"] == 2
    assert all(r.baseline_cached_at is None and r.baseline_ms and 30 <= r.baseline_ms < 80 for r in out.results)


def test_an_unsigned_entry_written_as_the_old_worker_could_is_a_miss(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path, 3600, {"name": "gpu"}, EvalSettings(device="cpu"), "abc")
    cache.put(SCENARIOS[0], 1.0, 0.0, 3)
    (path,) = tmp_path.glob("baseline-*.json")
    path.write_text(json.dumps(json.loads(path.read_text())["entry"]))  # the plain JSON of v2
    assert cache.get(SCENARIOS[0]) is None


def test_the_worker_never_holds_the_cache_key(tmp_path: Path) -> None:
    """The key stays with the executor's process: not in the job, not in the worker's memory or
    environment (a candidate that finds it could sign its own entries)."""
    from harness.signed_entries import key_path, signing_key

    evaluate(tmp_path)  # the executor made and used the key
    key = signing_key().hex()
    assert key_path().read_text().strip() == key
    settings = EvalSettings(device="cpu", peers=(), timing=FAST, baseline_cache_dir=str(tmp_path))
    job = WorkerJob("attention-forward", KernelSpec("k", "python", "tests.cpu_cheats:holds_the_cache_key"),
                    KernelSpec("baseline", "python", "tests.cpu_kernels:correct_30ms"), SCENARIOS, settings)
    assert key not in json.dumps(job.to_dict())
    out = LocalExecutor().run(job)
    assert [r.status for r in out.results] == [PASS, PASS], [r.reason for r in out.results]
