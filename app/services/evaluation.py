"""Evaluations of candidates through the harness. These functions block (compile, then run
the candidate in the harness's spawned worker processes: candidate code never runs in the
server process); the runner calls them in a thread while it holds the device."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

from app.domain.kernel_names import kernel_path
from app.settings import PROJECT_ROOT
from app.store.models import CUDA, PYTHON_CPU
from harness.cluster import ClusterExecutor
from harness.executor import Executor, LocalExecutor, ProgressFn
from harness.job import KernelSpec, WorkerJob
from harness.report import EvaluationReport
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.timing import TimingSettings

PYTHON_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
CONTRACT = PROJECT_ROOT / "kernels" / "attention" / "contract.h"
PYTHON_CONTRACT = (
    "python-cpu session: a kernel is a `module:function` target importable by the harness's worker "
    "(e.g. tests.cpu_kernels:correct). The function receives AttentionBuffers (q, k, v, o, causal, scale, "
    "workspace) and returns 0 on success or a CUDA-style error code."
)

# Small shapes for python-cpu sessions: the CPU computes the fp32 reference of each.
CPU_SCENARIOS: list[Scenario] = [
    Scenario("cpu-causal-d64", "prefill", 1, 77, 77, 4, 2, 64, causal=True),
    Scenario("cpu-full-ragged", "ragged", 2, 100, 33, 2, 2, 64, causal=False),
    Scenario("cpu-decode", "decode", 2, 2, 160, 4, 1, 32, causal=True),
    Scenario("cpu-chunk-hidden", "chunked", 1, 40, 130, 4, 1, 32, causal=True, hidden=True),
]
# Enough repetitions that a median of millisecond sleeps survives a busy 2-core machine.
CPU_TIMING = TimingSettings(budget_ms=20, min_reps=7, min_reps_slow=7, max_reps=15, wall_reps=2)
# The sessions' evaluations and the judges' re-times keep the sample cap their stability was
# measured under (docs/campaigns.md: the leader at 0.991-1.002x of its own time in 31 re-times);
# the CLI's fresh evaluation takes fewer (harness/timing.py, docs/harness.md "Settings and their defaults").
SERVER_MAX_REPS = 50


def gpu_timing(budget_ms: float) -> TimingSettings:
    """The timing settings of the server's GPU evaluations for its `timing_budget_ms`."""
    return TimingSettings(budget_ms=budget_ms, max_reps=SERVER_MAX_REPS)


@dataclass(frozen=True)
class Implementation:
    """A kernel the harness can evaluate: a .cu file, or a python `module:function`."""

    kind: str
    ref: str  # file path (cuda) or module:function (python-cpu)
    label: str


def contract_text(kind: str) -> str:
    """The ABI every kernel of this kind implements, as the agent reads it."""
    return PYTHON_CONTRACT if kind == PYTHON_CPU else CONTRACT.read_text()


def resolve_path(ref: str) -> Path:
    """A candidate source the runner wrote (an absolute path of its choosing), or a kernel the
    server lists, by name (app/domain/kernel_names.py): never a relative path a request made up."""
    path = Path(ref)
    return path if path.is_absolute() else kernel_path(ref)


class Evaluator:
    """Where the server's evaluations run: this machine, through one executor that keeps a spare
    worker process started and imported between evaluations (harness/executor.py), or a Dask
    cluster, through one connection to its scheduler (harness/cluster.py). One per server, held
    by `ServerContext`; tests and the scripts' CPU stand-in substitute a subclass."""

    def __init__(self, cluster: str | None = None) -> None:
        self.cluster = cluster
        self._executor: LocalExecutor | ClusterExecutor | None = None
        self._lock = threading.Lock()

    def executor(self) -> LocalExecutor | ClusterExecutor:
        """The executor, started on first use (never before a session evaluates something)."""
        with self._lock:
            if self._executor is None:
                self._executor = ClusterExecutor(self.cluster) if self.cluster else LocalExecutor(spare=True)
            return self._executor

    def started(self) -> LocalExecutor | ClusterExecutor | None:
        """The executor if one is running (the devices panel reads it without starting one)."""
        return self._executor

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.close()

    def prebuild(self, candidate: Implementation, against: Implementation) -> None:
        """Compile a CUDA candidate and the kernel it is timed against before the evaluation waits
        for the GPU: nvcc then never holds the device queue, and the evaluation finds both in the
        compile cache (what the static checks refuse is not compiled; errors are the evaluation's
        to report)."""
        if candidate.kind != CUDA:
            return
        from harness.evaluate import precompile

        for impl in (candidate, against):
            precompile(resolve_path(impl.ref))

    def evaluate(self, candidate: Implementation, against: Implementation, scenarios: list[Scenario],
                 settings: EvalSettings, progress: ProgressFn | None, cancel: threading.Event,
                 suite: str = "all", one_device: bool = False) -> EvaluationReport:
        """Verify and time `candidate` against `against` (the baseline, or the previous leader
        for a re-time), interleaved in the same worker processes. On a cluster the scenarios are
        sharded over its GPUs unless `one_device` (the judge's re-time stays on one GPU)."""
        executor: Executor = self.executor()
        if isinstance(executor, ClusterExecutor) and one_device:
            executor = executor.one_device()
        if candidate.kind == CUDA:
            from harness.evaluate import evaluate_source

            return evaluate_source(
                resolve_path(candidate.ref), scenarios, baseline=resolve_path(against.ref), suite=suite,
                settings=settings, progress=progress, cancel=cancel, executor=executor,
            )
        if candidate.kind == PYTHON_CPU:
            from harness.evaluate import evaluate_job

            job = WorkerJob(
                problem="attention-forward",
                candidate=KernelSpec(candidate.label, "python", candidate.ref),
                baseline=KernelSpec(against.label, "python", against.ref),
                scenarios=scenarios, settings=settings,
            )
            # CPU stand-ins run on a fresh local executor unless a cluster evaluates them.
            local = executor if isinstance(executor, ClusterExecutor) else None
            return evaluate_job(job, kernel=candidate.ref, suite=suite, executor=local,
                                progress=progress, cancel=cancel)
        raise ValueError(f"unknown candidate kind {candidate.kind!r}")


def eval_settings(kind: str, *, trials: int, timing_budget_ms: float, scenario_timeout_s: float,
                  peers: tuple[str, ...], peer_cache_dir: Path | None = None,
                  peer_cache_hours: float = 0.0) -> EvalSettings:
    if kind == PYTHON_CPU:
        return EvalSettings(device="cpu", trials=trials, peers=(), timing=CPU_TIMING,
                            scenario_timeout_s=scenario_timeout_s, setup_timeout_s=120.0)
    return EvalSettings(trials=trials, peers=peers, timing=gpu_timing(timing_budget_ms),
                        scenario_timeout_s=scenario_timeout_s,
                        peer_cache_dir=str(peer_cache_dir) if peer_cache_dir and peer_cache_hours > 0 else None,
                        peer_cache_max_age_s=peer_cache_hours * 3600)
