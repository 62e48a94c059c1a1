"""ClusterExecutor: evaluations on a Dask distributed cluster, one worker per GPU.

One evaluation is cut into shards of scenarios (one per GPU worker, balanced by work), each
shard runs on one worker, and the results are merged back in suite order: the report has the
same structure as LocalExecutor's and its geomeans are computed over the merged scenarios.

Isolation is LocalExecutor's, unchanged: a shard task on a worker runs the job in freshly
spawned processes with the per-scenario and setup time limits, so a crashing or hanging
kernel kills its own process, never the cluster worker or the server. A cluster worker that
dies mid-shard (killed, out of memory, machine lost) is noticed by the scheduler, which runs
the shard again on another worker; past `distributed.scheduler.allowed-failures` the shard's
scenarios are reported failed with the reason.

Scheduling: every worker declares the resource GPU=1 and every shard asks for GPU=1, so each
GPU runs one candidate at a time, and the evaluations of several sessions queue for the GPUs
in the scheduler. A worker is started with `socratic cluster worker` (docs/harness.md)."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.executor import ExecutionResult, Executor, LocalExecutor, Progress, ProgressFn
from harness.job import KernelSpec, WorkerJob
from harness.report import ERROR, SKIPPED, ScenarioResult
from harness.scenario import Scenario

GPU_RESOURCE = "GPU"
# Dask's worker processes are daemonic by default, and a daemonic process may not start
# children; every shard starts its evaluation in spawned children (LocalExecutor).
WORKER_ENV = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
KEY_PREFIX = "socratic-shard"


def scenario_cost(s: Scenario) -> float:
    """Relative work of a scenario (score and value products), to balance the shards."""
    return float(s.batch * s.heads_q * s.visible_pairs() * s.head_dim) + 1.0


def plan_shards(scenarios: Sequence[Scenario], n: int) -> list[list[int]]:
    """Indices of `scenarios` cut into at most `n` non-empty shards of similar work (largest
    first onto the lightest shard); each shard keeps suite order."""
    n = max(1, min(n, len(scenarios)))
    loads = [0.0] * n
    shards: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(scenarios)), key=lambda i: -scenario_cost(scenarios[i])):
        k = min(range(n), key=lambda j: loads[j])
        shards[k].append(i)
        loads[k] += scenario_cost(scenarios[i])
    return [sorted(s) for s in shards if s]


def _ship(spec: KernelSpec | None) -> bytes | None:
    """A compiled library travels as bytes (workers may be other machines)."""
    if spec is None or spec.kind != "library" or not Path(spec.target).is_file():
        return None
    return Path(spec.target).read_bytes()


def _land(spec: KernelSpec | None, data: bytes | None) -> KernelSpec | None:
    """Write a shipped library into this worker's cache and point the spec at it."""
    if spec is None or data is None:
        return spec
    digest = hashlib.sha256(data).hexdigest()[:24]
    folder = Path(os.environ.get("SOCRATIC_CLUSTER_CACHE", Path(tempfile.gettempdir()) / "socratic-cluster"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}.so"
    if not path.is_file():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return replace(spec, target=str(path))


def run_shard(payload: dict[str, Any], candidate_so: bytes | None, baseline_so: bytes | None,
              topic: str, cancel_name: str, shard: int) -> dict[str, Any]:
    """The task a cluster worker runs: shard number `shard` of a job through LocalExecutor
    (fresh processes, time limits), progress sent to the client as events on `topic`."""
    from distributed import Event, get_client, get_worker

    worker = get_worker()
    client = get_client()
    # A worker process its nanny started as a daemon (Dask's default, and what a nanny restart
    # does whatever the configuration said) may not start children; the shard must.
    current = multiprocessing.current_process()
    if current.daemon:
        current._config["daemon"] = False  # type: ignore[attr-defined]
    job = WorkerJob.from_dict(payload)
    job = replace(job, candidate=_land(job.candidate, candidate_so) or job.candidate,
                  baseline=_land(job.baseline, baseline_so))
    cancel = threading.Event()
    finished = threading.Event()

    def watch() -> None:
        remote_cancel = Event(cancel_name, client=client)  # made here: this thread is no task's
        while not finished.is_set():
            try:
                if remote_cancel.wait(timeout=0.5):
                    cancel.set()
                    return
            except Exception:  # the client is gone or the event was dropped: keep evaluating
                time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()

    def progress(p: Progress) -> None:
        worker.log_event(topic, {"shard": shard, "body": {
            "scenario": p.scenario, "message": p.message,
            "result": p.result.to_dict() if p.result is not None else None,
        }})

    began = time.time()
    try:
        out = LocalExecutor().run(job, progress, cancel)
    finally:
        finished.set()
    return {
        "began": began, "ended": time.time(),
        "results": [r.to_dict() for r in out.results], "device": out.device, "restarts": out.restarts,
        "seconds": out.seconds, "worker": worker.address, "worker_name": str(worker.name),
    }


@dataclass
class _Shard:
    index: int
    scenario_indices: list[int]
    future: Any = None
    started: float | None = None
    done: bool = False
    by_name: dict[str, int] = field(default_factory=dict)


class ClusterExecutor(Executor):
    """Runs jobs on the Dask cluster at `address` (tcp://host:port), sharded by scenario.

    shards: how many shards one evaluation is cut into; None: one per GPU worker now in the
    cluster. An executor made with shards=1 keeps a whole job on one GPU (the judge's re-time
    of a contender against the leader, which must be interleaved on one device)."""

    def __init__(self, address: str, shards: int | None = None, connect_timeout_s: float = 30.0,
                 no_worker_timeout_s: float = 300.0) -> None:
        self.address = address
        self.shards = shards
        self.connect_timeout_s = connect_timeout_s
        self.no_worker_timeout_s = no_worker_timeout_s
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        from distributed import Client

        with self._lock:
            if self._client is None or self._client.status in ("closed", "closing"):
                self._client = Client(self.address, timeout=self.connect_timeout_s,
                                      set_as_default=False)
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def one_device(self) -> ClusterExecutor:
        """The same cluster, each job on one GPU (shares this executor's connection)."""
        twin = ClusterExecutor(self.address, shards=1, connect_timeout_s=self.connect_timeout_s,
                               no_worker_timeout_s=self.no_worker_timeout_s)
        twin._client = self.client()
        return twin

    def gpu_workers(self) -> list[str]:
        info = self.client().scheduler_info(n_workers=-1)
        return sorted(a for a, w in info["workers"].items()
                      if w.get("resources", {}).get(GPU_RESOURCE, 0) >= 1)

    def status(self) -> list[dict[str, Any]]:
        """Each worker of the cluster: its GPU, what it is evaluating and what waits for it."""
        return cluster_status(self.client())

    def run(
        self, job: WorkerJob, progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> ExecutionResult:
        from distributed import Event

        started = time.monotonic()
        client = self.client()
        scenarios = job.scenarios
        total = len(scenarios)
        results: dict[int, ScenarioResult] = {}
        width = self.shards or max(1, len(self.gpu_workers()))
        shards = [_Shard(k, idx) for k, idx in enumerate(plan_shards(scenarios, width))]
        token = uuid.uuid4().hex[:12]
        topic = f"socratic-progress-{token}"
        cancel_name = f"socratic-cancel-{token}"

        def record(idx: int, result: ScenarioResult) -> None:
            new = idx not in results
            results[idx] = result
            if progress and new:
                progress(Progress(len(results), total, result.scenario, result))

        for shard in shards:
            shard.by_name = {scenarios[i].name: i for i in shard.scenario_indices}

        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def drain() -> None:
            """Progress from the workers, handled on this thread (never on the client's loop)."""
            while True:
                try:
                    msg = inbox.get_nowait()
                except queue.Empty:
                    return
                shard_k, body = msg.get("shard"), msg.get("body", {})
                if not isinstance(shard_k, int) or not 0 <= shard_k < len(shards):
                    continue
                shard = shards[shard_k]
                if shard.started is None:
                    shard.started = time.monotonic()
                if body.get("result"):
                    r = ScenarioResult.from_dict(body["result"])
                    if r.scenario in shard.by_name:
                        record(shard.by_name[r.scenario], r)
                elif progress:
                    progress(Progress(len(results), total, body.get("scenario", ""), None,
                                      body.get("message", "")))

        client.subscribe_topic(topic, lambda event: inbox.put(event[1]))
        remote_cancel = Event(cancel_name, client=client)
        candidate_so, baseline_so = _ship(job.candidate), _ship(job.baseline)
        label = job.candidate.label.replace("/", "_")
        try:
            for shard in shards:
                part = replace(job, scenarios=[scenarios[i] for i in shard.scenario_indices])
                key = f"{KEY_PREFIX}-{label}-{shard.index + 1}of{len(shards)}-{len(part.scenarios)}sc-{token}"
                shard.future = client.submit(
                    run_shard, part.to_dict(), candidate_so, baseline_so, topic, cancel_name,
                    shard.index, key=key, resources={GPU_RESOURCE: 1}, pure=False,
                )
            outcome = self._wait(client, shards, job, cancel, remote_cancel, drain)
            drain()
        finally:
            client.unsubscribe_topic(topic)
            if cancel is not None and cancel.is_set():
                remote_cancel.set()
            pending = [s.future for s in shards if s.future is not None and not s.future.done()]
            if pending:
                client.cancel(pending)
        device: dict[str, Any] = {}
        restarts = 0
        placements = []
        for shard in shards:
            got = outcome.get(shard.index)
            if isinstance(got, dict):
                for i, d in zip(shard.scenario_indices, got["results"], strict=True):
                    record(i, ScenarioResult.from_dict(d))
                if not device:
                    device = dict(got["device"])
                restarts += int(got["restarts"])
                placements.append({"shard": shard.index + 1, "worker": got["worker"],
                                   "name": got["worker_name"], "scenarios": len(shard.scenario_indices),
                                   "seconds": round(float(got["seconds"]), 2),
                                   "setup_s": got["device"].get("setup_s"), "pid": got["device"].get("pid"),
                                   "began": got["began"], "ended": got["ended"]})
            else:
                status = SKIPPED if got == "cancelled" else ERROR
                reason = "evaluation cancelled" if got == "cancelled" else str(got)
                for i in shard.scenario_indices:
                    if i not in results or got != "cancelled":
                        s = scenarios[i]
                        record(i, ScenarioResult(s.name, s.category, s.hidden, status, reason))
        device["cluster"] = {"address": self.address, "shards": placements}
        ordered = [results[i] for i in range(total)]
        return ExecutionResult(ordered, device, restarts, time.monotonic() - started)

    def _wait(self, client: Any, shards: list[_Shard], job: WorkerJob, cancel: threading.Event | None,
              remote_cancel: Any, drain: Callable[[], None]) -> dict[int, dict[str, Any] | str]:
        """Each shard's result dict, or why it has none. Never waits without a bound once a
        shard runs: its own limits (setup, per scenario, restarts) plus a margin."""
        from distributed import KilledWorker

        s = job.settings
        outcome: dict[int, dict[str, Any] | str] = {}
        no_worker_since: float | None = None
        looked = 0.0
        while len(outcome) < len(shards):
            drain()
            if cancel is not None and cancel.is_set():
                remote_cancel.set()
                cancel_deadline = time.monotonic() + s.scenario_timeout_s + 30
                for shard in shards:
                    if shard.index in outcome:
                        continue
                    if shard.started is None:
                        shard.future.cancel()
                        outcome[shard.index] = "cancelled"
                        continue
                    try:
                        outcome[shard.index] = shard.future.result(
                            timeout=max(1.0, cancel_deadline - time.monotonic()))
                    except Exception:
                        outcome[shard.index] = "cancelled"
                break
            for shard in shards:
                if shard.index in outcome or not shard.future.done():
                    if shard.index not in outcome and shard.started is not None:
                        bound = (s.setup_timeout_s + s.scenario_timeout_s * len(shard.scenario_indices)) \
                            * (s.max_restarts + 1) + 60
                        if time.monotonic() - shard.started > bound:
                            shard.future.cancel()
                            outcome[shard.index] = (f"the shard ran past {bound:.0f} s on the cluster; "
                                                    "it was abandoned")
                    continue
                try:
                    outcome[shard.index] = shard.future.result()
                except KilledWorker as exc:
                    outcome[shard.index] = (f"the cluster workers running this shard died repeatedly "
                                            f"({exc}); its scenarios were not evaluated")
                except Exception as exc:
                    outcome[shard.index] = f"the shard failed on the cluster: {type(exc).__name__}: {exc}"
            if len(outcome) < len(shards) and time.monotonic() - looked > 2.0:
                looked = time.monotonic()
                if self._has_gpu_workers(client):
                    no_worker_since = None
                else:
                    no_worker_since = no_worker_since or time.monotonic()
                    if time.monotonic() - no_worker_since > self.no_worker_timeout_s:
                        for shard in shards:
                            if shard.index not in outcome:
                                shard.future.cancel()
                                outcome[shard.index] = (
                                    f"the cluster at {self.address} has had no GPU worker for "
                                    f"{self.no_worker_timeout_s:.0f} s")
            if len(outcome) < len(shards):
                time.sleep(0.2)
        return outcome

    def _has_gpu_workers(self, client: Any) -> bool:
        try:
            info = client.scheduler_info(n_workers=-1)
        except Exception:
            return False
        return any(w.get("resources", {}).get(GPU_RESOURCE, 0) >= 1 for w in info["workers"].values())


def _describe(key: Any) -> str:
    text = str(key)
    if not text.startswith(KEY_PREFIX + "-"):
        return text
    body = text[len(KEY_PREFIX) + 1:].rsplit("-", 1)[0]  # drop the evaluation token
    label, shard, count = body.rsplit("-", 2)
    return f"{label}: shard {shard.replace('of', '/')} ({count.removesuffix('sc')} scenarios)"


def _worker_view(dask_worker: Any) -> dict[str, Any]:
    state = dask_worker.state
    waiting = [k for k, ts in state.tasks.items() if ts.state in ("ready", "constrained", "waiting", "fetch")]
    return {
        "pid": os.getpid(),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "running": [_describe(getattr(ts, "key", ts)) for ts in state.executing],
        "waiting": [_describe(k) for k in waiting],
    }


def cluster_status(client: Any) -> list[dict[str, Any]]:
    """One row per worker: address, name, GPU (CUDA_VISIBLE_DEVICES), pid, running, waiting."""
    info = client.scheduler_info(n_workers=-1)
    views = client.run(_worker_view, on_error="return")
    rows = []
    for address, w in sorted(info["workers"].items()):
        view = views.get(address)
        view = view if isinstance(view, dict) else {"running": [], "waiting": [], "pid": None, "gpu": ""}
        rows.append({
            "address": address, "name": str(w.get("name", "")),
            "gpu_slots": w.get("resources", {}).get(GPU_RESOURCE, 0),
            "gpu": view["gpu"], "pid": view["pid"], "running": view["running"], "waiting": view["waiting"],
        })
    return rows


def worker_command(scheduler: str, gpu: str, name: str | None = None) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one cluster worker for `gpu` (a CUDA device index, or "cpu" for
    a CPU-only stand-in): one thread, GPU=1, pinned with CUDA_VISIBLE_DEVICES."""
    import sys

    env = dict(os.environ, **WORKER_ENV)
    if gpu != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = gpu
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--nthreads", "1",
            "--nworkers", "1", "--resources", f"{GPU_RESOURCE}=1", "--name", name or f"gpu{gpu}",
            "--no-dashboard"]
    return argv, env
