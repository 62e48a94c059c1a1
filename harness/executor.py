"""Executors run a worker job somewhere and return one result per scenario.

The interface is what the server and the CLI depend on; LocalExecutor evaluates on this
machine, each job in a fresh *spawned* process (never forked: CUDA cannot be re-initialised
in a forked child) with its own CUDA context. A crash, hang or broken context fails the
scenario it happened in, and the job continues in a new process from the next scenario."""

from __future__ import annotations

import contextlib
import glob
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.report import CRASH, ERROR, SKIPPED, TIMEOUT, ScenarioResult

if TYPE_CHECKING:
    from harness.answer_key import AnswerKeyProcess
    from harness.job import WorkerJob
    from harness.scenario import Scenario
    from harness.settings import EvalSettings


def gpu_device_nodes() -> bool:
    """Whether the machine has an NVIDIA device at all: a look at /dev and /proc, no process.
    False means no CUDA GPU can be there, so nothing more expensive needs asking."""
    return any(glob.glob("/dev/nvidia[0-9]*")) or any(glob.glob("/proc/driver/nvidia/gpus/*"))


# The processes' entry points import the worker (and torch) in the child only: this module stays
# free of torch, so the CLI can start its worker before it imports torch itself.
def _spare_entry(conn: Any, parent: int) -> None:
    from harness.worker import spare_worker

    spare_worker(conn, parent)
    _leave()


def _run_entry(payload: dict[str, Any], start: int, conn: Any, spare: bool, parent: int) -> None:
    from harness.worker import run_worker

    run_worker(payload, start, conn, spare, parent)
    _leave()


def _leave() -> None:
    """How a worker that finished its job ends: at once, without the C++ destructors. Under the
    sandbox (harness/sandbox.py refuses unlink(2)) a destructor that unlinks a shared-memory
    file, such as the reference counts of the arena the worker sent its answer key over CUDA
    IPC, throws from a destructor and aborts the process ("could not unlink the shared memory
    file /torch_..."). What it would have removed, its executor removes once the job's
    processes have ended (`remove_shared_memory`). An exception in the job is not hidden: it
    leaves the usual way, with its traceback and exit code 1."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)


SHM_DIR = "/dev/shm"


def remove_shared_memory(pids: Sequence[int], shm_dir: str = SHM_DIR) -> list[str]:
    """Remove the shared-memory files torch made in these processes, which have ended; returns
    their names. torch names them /torch_<pid>_... (at::NewProcessWideShmHandle), and the
    process that drops the last reference unlinks one; a worker is killed after its job, or
    leaves without destructors (`_leave`), so its own are left behind: without this, every GPU
    evaluation with an answer key would leave its arena's reference counts (tens of KB of
    memory) in /dev/shm for as long as the machine runs. Only the given pids' files are
    touched, and only call this when no process needs them any more (the answer key closed)."""
    removed = []
    for pid in pids:
        for path in glob.glob(os.path.join(glob.escape(shm_dir), f"torch_{int(pid)}_*")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(os.path.basename(path))
    return removed


@dataclass
class Progress:
    """What a progress display needs: where the job is and what just finished."""

    done: int
    total: int
    scenario: str
    result: ScenarioResult | None = None
    message: str = ""


ProgressFn = Callable[[Progress], None]


@dataclass
class ExecutionResult:
    results: list[ScenarioResult]
    device: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    seconds: float = 0.0


class Executor(ABC):
    """Evaluates a worker job; implementations decide where (this machine, a remote GPU)."""

    @abstractmethod
    def run(
        self, job: WorkerJob, progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> ExecutionResult: ...


def _discard(proc: Any, conn: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        conn.send(("quit",))
    conn.close()
    proc.join(timeout=2)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)


def _sandbox_spec() -> dict[str, Any]:
    """The worker's sandbox helper, built here (harness/sandbox.py), with its digest."""
    from harness.sandbox import helper_library

    try:
        built = helper_library()
    except (OSError, subprocess.SubprocessError) as exc:
        return {"helper": None, "unavailable": f"the helper did not build: {exc}"}
    if built is None:
        return {"helper": None, "unavailable": "no C compiler to build the helper"}
    return {"helper": built[0], "sha256": built[1]}


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code == -signal.SIGSYS:
        # A refused system call made with SIGSYS blocked: the kernel ends the process.
        return ("killed by SIGSYS: the candidate made a system call the sandbox refuses while it "
                "blocked the signal that reports it")
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class LocalExecutor(Executor):
    """Runs jobs on this machine's GPU (or CPU, for tests) in spawned child processes.

    With spare=True (a long-lived executor, such as the server's) it keeps one spare process
    that has already started and imported torch and the harness, and hands the next job to it:
    an evaluation then skips that fixed cost. The spare touches no GPU until its job arrives,
    and each process still runs exactly one job."""

    def __init__(self, spare: bool = False) -> None:
        self._ctx = mp.get_context("spawn")
        self._spare_wanted = spare
        self._spare: tuple[Any, Any] | None = None  # (process, connection)
        # The answer key prestart starts and warm tells what to compute; the next job takes it.
        self._key: AnswerKeyProcess | None = None
        self._lock = threading.Lock()

    def _spawn_spare(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_spare_entry, args=(child, os.getpid()), daemon=True)
        proc.start()
        child.close()
        with self._lock:
            old, self._spare = self._spare, (proc, parent)
        if old is not None:
            _discard(*old)

    def _launch(self, payload: dict[str, Any], start: int) -> tuple[Any, Any]:
        """A process working on the job from scenario `start`, and the end of its pipe."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            proc, conn = spare
            try:
                if not proc.is_alive():
                    raise OSError("the spare process has exited")
                conn.send(("job", payload, start))
            except (OSError, ValueError):
                _discard(proc, conn)
            else:
                return proc, conn
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_run_entry, args=(payload, start, send, False, os.getpid()),
                                 daemon=True)
        proc.start()
        send.close()
        return proc, recv

    def prestart(self) -> None:
        """Start a spare process now, even on an executor without spare=True: it imports torch
        and the harness while the caller compiles, and the next job goes to it. Beside it the
        process of an answer key (harness/answer_key.py), which `warm` puts to work."""
        from harness.answer_key import AnswerKeyProcess

        with self._lock:
            have = self._spare is not None
            key = self._key
            if key is None:
                self._key = key = AnswerKeyProcess(self._ctx)
        if not have:
            self._spawn_spare()

    def warm(self, problem: str, scenarios: Sequence[Scenario], settings: EvalSettings) -> bool:
        """Tell the spare process that the GPU is its evaluation's until the job ends: it makes
        its CUDA context and builds the peers' plans for these scenarios now, while the caller
        compiles, and stops when the job arrives (harness/worker.py: warm_up). Only for a
        caller that owns the GPU for the whole evaluation (the CLI; evaluate_source with its
        own executor): the server's spare is never told, another worker may be timing. False
        when there is no spare to tell."""
        with self._lock:
            spare, key = self._spare, self._key
        if spare is None:
            return False
        spec = {"problem": problem, "scenarios": [s.to_dict() for s in scenarios],
                "settings": settings.to_dict()}
        try:
            spare[1].send(("warm", spec))
        except (OSError, ValueError):
            return False
        if key is not None:
            # It computes every trial's references meanwhile, in its own process.
            key.warm(problem, scenarios, settings)
        return True

    def close(self) -> None:
        """End the spare process and the answer key, if there are."""
        with self._lock:
            spare, self._spare = self._spare, None
            key, self._key = self._key, None
        if spare is not None:
            _discard(*spare)
        if key is not None:
            key.close()

    def run(
        self, job: WorkerJob, progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> ExecutionResult:
        started = time.monotonic()
        # This process never loads a candidate: it reads the signed caches, passes the entries in
        # the job, and alone writes what the worker measured (harness/trusted_cache.py).
        from dataclasses import replace as _replace

        from harness import trusted_cache

        job = _replace(job)
        cache_facts = trusted_cache.prepare(job)
        payload = job.to_dict()
        if job.settings.hardening:
            payload["sandbox"] = _sandbox_spec()
        with self._lock:  # a warmed answer key serves this job only (every restart of it)
            key, self._key = self._key, None
        if key is not None and key.warmed and payload.get("answer_key") is None:
            payload["answer_key"] = key.handle()
        launched: list[Any] = []  # the job's worker processes, a restart's too
        try:
            proposals: list[tuple[int, dict[str, Any]]] = []
            out = self._run(job, payload, progress, cancel, started, proposals, launched)
            out.device.update(cache_facts)
            trusted_cache.keep(job, out.results, out.device, proposals)
            return out
        finally:
            if key is not None:
                key.close()  # its references leave the device before anything else runs
            remove_shared_memory([p.pid for p in launched if p.pid is not None and not p.is_alive()])

    def _run(
        self, job: WorkerJob, payload: dict[str, Any], progress: ProgressFn | None,
        cancel: threading.Event | None, started: float,
        proposals: list[tuple[int, dict[str, Any]]] | None = None, launched: list[Any] | None = None,
    ) -> ExecutionResult:
        scenarios = job.scenarios
        total = len(scenarios)
        results: dict[int, ScenarioResult] = {}
        device: dict[str, Any] = {}
        restarts = 0
        next_index = 0
        settings = job.settings

        def record(idx: int, result: ScenarioResult) -> None:
            results[idx] = result
            if progress:
                progress(Progress(len(results), total, result.scenario, result))

        def fail_rest(start: int, status: str, reason: str) -> None:
            for i in range(start, total):
                if i not in results:
                    s = scenarios[i]
                    record(i, ScenarioResult(s.name, s.category, s.hidden, status, reason))

        while next_index < total:
            if cancel is not None and cancel.is_set():
                fail_rest(next_index, SKIPPED, "evaluation cancelled")
                break
            spawned = time.monotonic()
            proc, recv = self._launch(payload, next_index)
            if launched is not None:
                launched.append(proc)
            if self._spare_wanted:
                self._spawn_spare()  # it imports while this job runs; no GPU work
            current: int | None = None
            got_ready = False
            deadline = time.monotonic() + settings.setup_timeout_s
            outcome = "running"
            while True:
                if cancel is not None and cancel.is_set():
                    outcome = "cancelled"
                    break
                try:
                    ready = recv.poll(0.2)
                except (EOFError, OSError):
                    ready = False
                if ready:
                    try:
                        msg = recv.recv()
                    except (EOFError, OSError):
                        outcome = "died"
                        break
                    kind = msg[0]
                    if kind == "ready":
                        device = msg[1]
                        # Process start, imports, CUDA context, kernel load: a fixed cost.
                        device["setup_s"] = round(time.monotonic() - spawned, 2)
                        got_ready = True
                        deadline = time.monotonic() + settings.scenario_timeout_s
                        if progress:
                            progress(Progress(len(results), total, "", None,
                                              f"worker ready on {device.get('name', '?')}"))
                    elif kind == "start":
                        current = msg[1]
                        deadline = time.monotonic() + settings.scenario_timeout_s
                        if progress:
                            progress(Progress(len(results), total, scenarios[msg[1]].name))
                    elif kind == "result":
                        record(msg[1], ScenarioResult.from_dict(msg[2]))
                        if proposals is not None and len(msg) > 3 and isinstance(msg[3], list):
                            proposals.extend((msg[1], p) for p in msg[3] if isinstance(p, dict))
                        next_index = msg[1] + 1
                        current = None
                    elif kind == "setup_error":
                        outcome = "setup_error"
                        fail_rest(next_index, ERROR, f"evaluation could not start: {msg[1]}")
                        next_index = total
                        break
                    elif kind == "done":
                        if len(msg) > 1:
                            for k, v in msg[1].items():  # what the worker adds at the end
                                device[k] = {**device.get(k, {}), **v}
                        outcome = "done"
                        break
                    continue
                if not proc.is_alive() and not recv.poll(0):
                    outcome = "died"
                    break
                if time.monotonic() > deadline:
                    outcome = "timeout"
                    break
            if outcome in ("timeout", "cancelled") or proc.is_alive():
                proc.kill()
            proc.join(timeout=30)
            recv.close()
            if outcome in ("done", "setup_error"):
                break
            if outcome == "cancelled":
                fail_rest(next_index, SKIPPED, "evaluation cancelled")
                break
            # The worker timed out or died: charge the scenario it was on, then go on.
            if not got_ready:
                why = (f"did not start within {settings.setup_timeout_s:.0f} s"
                       if outcome == "timeout" else f"died during setup ({_signal_name(proc.exitcode)})")
                fail_rest(next_index, ERROR, f"the evaluation process {why}")
                break
            idx = current if current is not None else next_index
            if current is not None and idx not in results:
                s = scenarios[idx]
                if outcome == "timeout":
                    status, reason = TIMEOUT, (
                        f"ran past the {settings.scenario_timeout_s:.0f} s limit of one scenario "
                        "(hang or deadlock); the process was killed"
                    )
                else:
                    status, reason = CRASH, (
                        f"the evaluation process died ({_signal_name(proc.exitcode)})"
                    )
                record(idx, ScenarioResult(s.name, s.category, s.hidden, status, reason))
                idx += 1
            next_index = max(next_index, idx)
            restarts += 1
            if restarts > settings.max_restarts and next_index < total:
                fail_rest(
                    next_index, SKIPPED,
                    f"not run: the kernel crashed or hung the evaluation {restarts} times",
                )
                break
        ordered = [results[i] for i in range(total)]
        return ExecutionResult(ordered, device, restarts, time.monotonic() - started)
