"""The cluster executor on a real Dask cluster on loopback (a scheduler and worker processes),
evaluating the CPU backend's stand-in kernels: sharding and merging, isolation of crashes and
hangs, a cluster worker killed mid-evaluation, one candidate per worker at a time, cancel."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# A pinned dependency; skipped only on a bare GPU machine where the engine was not installed.
pytest.importorskip("distributed")

import dask
import distributed

from harness.cluster import ClusterExecutor, cluster_status, plan_shards, scenario_cost
from harness.executor import LocalExecutor, Progress
from harness.job import KernelSpec, WorkerJob
from harness.report import CRASH, ERROR, PASS, SKIPPED, TIMEOUT
from harness.scenario import Scenario
from harness.settings import EvalSettings
from tests.cpu_kernels import HANG_MARKS_ENV
from tests.harness.support import FAST, SCENARIOS, alive, children, start_cluster
from tests.waiting import wait_until

MANY = [Scenario(f"s{i}", "prefill", 1, 40 + 7 * i, 40 + 7 * i, 2, 1, 32, causal=bool(i % 2)) for i in range(8)]


@pytest.fixture(scope="module")
def hang_marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where hang_on_causal tells that an evaluation process is inside it (tests/cpu_kernels.py)."""
    return tmp_path_factory.mktemp("hang-marks")


@pytest.fixture(scope="module")
def cluster(hang_marks: Path) -> Iterator[Any]:
    # The cluster's worker processes, and the evaluation processes they start, inherit it.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(HANG_MARKS_ENV, str(hang_marks))
        c = start_cluster()
        yield c
        c.close()


@pytest.fixture
def executor(cluster: Any) -> Iterator[ClusterExecutor]:
    ex = ClusterExecutor(cluster.scheduler_address, no_worker_timeout_s=60)
    yield ex
    ex.close()


def job(fn: str, scenarios: list[Scenario] = SCENARIOS, baseline: str = "correct_slow", **opts: Any) -> WorkerJob:
    settings: dict[str, Any] = {"device": "cpu", "peers": (), "timing": FAST, **opts}
    return WorkerJob("attention-forward", KernelSpec(fn, "python", f"tests.cpu_kernels:{fn}"),
                     KernelSpec("baseline", "python", f"tests.cpu_kernels:{baseline}"), scenarios,
                     EvalSettings(**settings))


def verdicts(results: list[Any]) -> list[tuple[str, str, str]]:
    return [(r.scenario, r.status, r.reason) for r in results]


def kill_busy_worker(executor: ClusterExecutor, orphans: list[int] | None = None) -> list[int]:
    """SIGKILL the cluster worker process that is running a shard; its pid (none if idle). The
    evaluation processes it had started are added to `orphans`."""
    busy = [row["pid"] for row in executor.status() if row["running"]]
    for pid in busy[:1]:
        if orphans is not None:
            orphans.extend(children(pid))
        os.kill(pid, signal.SIGKILL)
    return busy[:1]


def worker_pids(executor: ClusterExecutor) -> dict[str, int]:
    return {row["address"]: row["pid"] for row in executor.status()}


def test_shards_cover_every_scenario_once_in_suite_order_with_balanced_work() -> None:
    shards = plan_shards(MANY, 3)
    assert sorted(i for s in shards for i in s) == list(range(len(MANY)))
    assert all(s == sorted(s) for s in shards) and len(shards) == 3
    loads = [sum(scenario_cost(MANY[i]) for i in s) for s in shards]
    assert max(loads) < 1.6 * min(loads)
    assert plan_shards(MANY[:2], 5) == [[0], [1]]  # never an empty shard


def test_a_sharded_evaluation_merges_into_the_local_verdicts(executor: ClusterExecutor) -> None:
    seen: list[Progress] = []
    for fn in ("wrong_causal_offset", "missing_tail", "not_supported_d64"):
        local = LocalExecutor().run(job(fn))
        remote = executor.run(job(fn), seen.append)
        assert verdicts(remote.results) == verdicts(local.results), fn
        shards = remote.device["cluster"]["shards"]
        assert len(shards) == 2 and len({s["worker"] for s in shards}) == 2
        assert sum(s["scenarios"] for s in shards) == len(SCENARIOS)
    finished = [p for p in seen if p.result is not None]
    assert len(finished) == 3 * len(SCENARIOS)
    assert all(1 <= p.done <= p.total == len(SCENARIOS) for p in finished)


def test_crash_and_hang_kill_their_own_process_never_the_cluster_worker(executor: ClusterExecutor) -> None:
    before = worker_pids(executor)
    crashed = executor.run(job("crash_on_causal"))
    assert [r.status for r in crashed.results] == [CRASH, CRASH, PASS]
    assert "exit code 77" in crashed.results[0].reason
    hung = executor.run(job("hang_on_causal", scenario_timeout_s=3.0, hardening=False))  # its mark is a file
    assert [r.status for r in hung.results] == [TIMEOUT, TIMEOUT, PASS]
    assert "3 s limit" in hung.results[0].reason
    assert worker_pids(executor) == before  # the same worker processes, still serving


def test_a_cluster_worker_killed_mid_evaluation_has_its_shard_run_again_elsewhere(
        executor: ClusterExecutor) -> None:
    one = executor.one_device()
    victims: list[int] = []

    def kill_the_runner(p: Progress) -> None:
        if p.result is not None and not victims:
            victims.extend(kill_busy_worker(one))

    out = one.run(job("correct_30ms", MANY), kill_the_runner)
    assert victims, "the evaluation finished before a worker could be killed"
    assert [r.status for r in out.results] == [PASS] * len(MANY)
    (shard,) = out.device["cluster"]["shards"]
    assert shard["scenarios"] == len(MANY)
    wait_until(lambda: len(executor.status()) >= 2, 60, "the nanny to restart the killed worker", 0.5)
    assert victims[0] not in worker_pids(executor).values()


def test_the_evaluation_process_of_a_killed_cluster_worker_stops_with_it(
        executor: ClusterExecutor, hang_marks: Path) -> None:
    """The killed worker's evaluation process is inside a kernel (one that never returns): it
    must not go on running beside the shard's second run on another worker (harness/lifeline.py)."""
    one = executor.one_device()
    orphans: list[int] = []
    gone_after: list[float] = []
    watcher: list[threading.Thread] = []

    def watch() -> None:
        killed = time.monotonic()
        with contextlib.suppress(TimeoutError):  # the time taken fails the test below
            wait_until(lambda: not any(alive(pid) for pid in orphans), 20,
                       "the killed worker's evaluation process to exit")
        gone_after.append(time.monotonic() - killed)

    def in_the_hang() -> bool:
        busy = [row["pid"] for row in one.status() if row["running"]]
        return any((hang_marks / str(pid)).exists() for w in busy for pid in children(w))

    def kill_inside_the_hang(p: Progress) -> None:
        if p.result is not None and not orphans:  # the next scenario is causal: the kernel hangs
            wait_until(in_the_hang, 30, "the evaluation process inside the hanging kernel", 0.05)
            kill_busy_worker(one, orphans)
            watcher.append(threading.Thread(target=watch, daemon=True))
            watcher[0].start()

    out = one.run(job("hang_on_causal", MANY[:4], scenario_timeout_s=2.0, hardening=False),  # its mark is a file
                  kill_inside_the_hang)
    assert orphans, "no evaluation process was found under the killed worker"
    watcher[0].join(25)
    assert gone_after and gone_after[0] < 2.0
    assert [r.status for r in out.results] == [PASS, TIMEOUT, PASS, TIMEOUT]  # the second run's verdicts


def test_a_shard_whose_workers_keep_dying_is_reported_failed_with_the_reason() -> None:
    cluster = start_cluster(1, **{"distributed.scheduler.allowed-failures": 0})
    ex = ClusterExecutor(cluster.scheduler_address, no_worker_timeout_s=60)
    try:
        killed: list[int] = []

        def kill(p: Progress) -> None:
            if p.result is not None and not killed:
                killed.extend(kill_busy_worker(ex))

        started = time.monotonic()
        out = ex.run(job("correct_30ms", MANY), kill)
        assert killed and time.monotonic() - started < 120
        assert all(r.status == ERROR for r in out.results)
        assert "died repeatedly" in out.results[-1].reason
    finally:
        ex.close()
        cluster.close()


def test_concurrent_evaluations_take_one_worker_each_and_a_worker_runs_one_at_a_time(
        executor: ClusterExecutor) -> None:
    outs: list[Any] = []

    def evaluate() -> None:
        outs.append(executor.one_device().run(job("correct_slow", MANY[:4])))

    threads = [threading.Thread(target=evaluate) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert len(outs) == 3 and all(r.status == PASS for o in outs for r in o.results)
    placed = [o.device["cluster"]["shards"][0] for o in outs]
    assert len({p["worker"] for p in placed}) == 2  # both workers were used
    for worker in {p["worker"] for p in placed}:
        spans = sorted((p["began"], p["ended"]) for p in placed if p["worker"] == worker)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def test_cancel_skips_the_rest_and_returns(executor: ClusterExecutor) -> None:
    cancel = threading.Event()

    def stop_after_first(p: Progress) -> None:
        if p.result is not None:
            cancel.set()

    started = time.monotonic()
    out = executor.one_device().run(job("correct_30ms", MANY), stop_after_first, cancel)
    assert time.monotonic() - started < 60
    statuses = [r.status for r in out.results]
    assert PASS in statuses and SKIPPED in statuses
    assert all(r.reason == "evaluation cancelled" for r in out.results if r.status == SKIPPED)


def test_status_names_each_worker_and_the_shard_it_runs(executor: ClusterExecutor) -> None:
    rows: list[list[dict[str, Any]]] = []

    def look(p: Progress) -> None:
        if p.result is not None and not rows:
            rows.append(cluster_status(executor.client()))

    executor.one_device().run(job("correct_30ms", MANY), look)
    (snapshot,) = rows
    assert len(snapshot) == 2 and all(r["gpu_slots"] == 1 for r in snapshot)
    running = [r for r in snapshot if r["running"]]
    assert len(running) == 1
    assert running[0]["running"] == ["correct_30ms: shard 1/1 (8 scenarios)"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_cli_starts_a_scheduler_and_workers_that_evaluate_and_report_status(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    address = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SOCRATIC_CLUSTER": address}
    socratic = [sys.executable, "-m", "harness", "cluster"]  # `socratic cluster` is the same parser
    procs = [subprocess.Popen([*socratic, "scheduler", "--port", address.rsplit(":", 1)[1]], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        procs += [subprocess.Popen([*socratic, "worker", "--gpu", "cpu", "--name", f"w{i}"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]

        def both_workers() -> list[dict[str, Any]]:
            out = subprocess.run([*socratic, "status", "--json"], env=env, capture_output=True, text=True)
            rows: list[dict[str, Any]] = json.loads(out.stdout) if out.returncode == 0 else []
            return rows if len(rows) >= 2 else []

        rows = wait_until(both_workers, 90, "both workers in `cluster status`", 1.0)
        assert sorted(r["name"] for r in rows) == ["w0", "w1"]
        # Each command is the Dask process itself, not a wrapper that a SIGTERM would leave behind.
        for p in procs:
            cmdline = Path(f"/proc/{p.pid}/cmdline").read_bytes().decode(errors="replace")
            assert "distributed.cli.dask_" in cmdline, cmdline
        ex = ClusterExecutor(address)
        try:
            result = ex.run(job("wrong_causal_offset"))
        finally:
            ex.close()
        assert [r.status for r in result.results] == [PASS, "fail", PASS]
        text = subprocess.run([*socratic, "status"], env=env, capture_output=True, text=True).stdout
        assert text.startswith(f"cluster {address}: 2 worker(s), 0 evaluating") and "w0" in text
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_a_cluster_without_gpu_workers_fails_the_evaluation_with_the_reason_instead_of_waiting() -> None:
    with dask.config.set({"distributed.worker.daemon": False}):
        cpu_only = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                            dashboard_address=":0")  # no GPU resource declared
    ex = ClusterExecutor(cpu_only.scheduler_address, shards=1, no_worker_timeout_s=3)
    try:
        started = time.monotonic()
        out = ex.run(job("correct"))
        assert time.monotonic() - started < 30
    finally:
        ex.close()
        cpu_only.close()
    assert all(r.status == ERROR and "no GPU worker" in r.reason for r in out.results)
