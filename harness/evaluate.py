"""One evaluation from source to report: compile the candidate (and the baseline), run the
job on an executor, and assemble the report. The CLI and the server both call this."""

from __future__ import annotations

import ctypes
import datetime as dt
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.compile import DEFAULT_ARCH, CompileError, arch_for_capability, compile_kernel
from harness.executor import Executor, LocalExecutor, Progress, ProgressFn
from harness.job import KernelSpec, WorkerJob
from harness.problem_registry import baseline_source
from harness.report import NOT_COMPILED, CompileInfo, EvaluationReport, ScenarioResult
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.static_checks import check_source

# The harness's fresh-input kernels (harness/attention/fresh_fill.py), named without importing torch.
FRESH_FILL_SOURCE = Path(__file__).parent / "attention" / "fresh_fill.cu"
# cuDeviceGetAttribute's attributes (cuda.h: CUdevice_attribute)
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


@lru_cache(maxsize=1)
def gpu_capability() -> tuple[int, int] | None:
    """The compute capability of the first visible GPU, from the driver itself (libcuda through
    ctypes: no torch, no CUDA context), or None when there is no driver or no GPU. This module
    imports no torch, so that the CLI starts nvcc at once: a thread's build waited for the main
    thread's `import torch` (docs/lab/2026-12-04-harness-pass-9-fresh-fill.md)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        count, dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return None
        if lib.cuDeviceGet(ctypes.byref(dev), 0) != 0:
            return None
        for value, attribute in ((major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                 (minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)):
            if lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, dev) != 0:
                return None
        return major.value, minor.value
    except (OSError, AttributeError):  # no driver library: no GPU here
        return None


def gpu_available() -> bool:
    return gpu_capability() is not None


def detect_arch() -> str:
    """The nvcc target for the GPU of this machine (sm_90a when there is none)."""
    found = gpu_capability()
    return arch_for_capability(*found) if found is not None else DEFAULT_ARCH


def precompile(source: Path, arch: str | None = None) -> bool:
    """What evaluate_source does before it runs anything: static checks, then nvcc into the
    compile cache. For callers that want the build done ahead (the server, before it queues for
    the GPU). False when the checks refuse the kernel (it is not compiled), it does not build,
    or it cannot be read; the evaluation then reports why."""
    try:
        if any(f.blocking for f in check_source(source.read_text(errors="replace"))):
            return False
        compile_kernel(source, arch=arch or detect_arch())
    except (CompileError, OSError):
        return False
    return True


class SassReader:
    """cuobjdump's opcode counts of a built library, read in a daemon thread; `attach` adds each
    kernel's counts to its ptxas resources as `sass` (nothing where no cuobjdump exists)."""

    def __init__(self, library: Path) -> None:
        self.mix: dict[str, dict[str, int]] | None = None
        self.thread = threading.Thread(target=self._read, args=(library,), name="sass-mix", daemon=True)
        self.thread.start()

    def _read(self, library: Path) -> None:
        from harness.resources import cuobjdump_path, instruction_mix

        if cuobjdump_path() is not None:
            self.mix, _ = instruction_mix(library)

    def attach(self, resources: list[dict[str, object]], timeout_s: float = 30.0) -> None:
        self.thread.join(timeout_s)
        if not self.mix:
            return
        for k in resources:
            counts = self.mix.get(str(k.get("name")))
            if counts is not None:
                k["sass"] = dict(counts)


class SmemReader:
    """Each kernel's dynamic shared memory as the source sets it (harness/shared_memory.py: what
    `ptxas -v` never reports), evaluated by nvcc's front end in a daemon thread while the worker
    runs; `attach` adds `dynamic_shared_bytes`, `dynamic_shared_optin` and `dynamic_shared` to
    each kernel's resources (left as they were where no nvcc exists or nothing is set)."""

    def __init__(self, source: str, log: str, arch: str) -> None:
        self.found: dict[str, dict[str, object]] = {}
        self.thread = threading.Thread(target=self._read, args=(source, log, arch), name="dynamic-smem",
                                       daemon=True)
        self.thread.start()

    def _read(self, source: str, log: str, arch: str) -> None:
        from harness.compile import DEFAULT_INCLUDE, gencode_flags, nvcc_path
        from harness.resources import demangle, parse_ptxas
        from harness.shared_memory import attach, nvcc_front_end, requests

        if not requests(source):
            return
        kernels = parse_ptxas(log)
        mangled = [k.name for k in kernels]
        readable = demangle(mangled)
        for k in kernels:
            k.name = readable.get(k.name, k.name)
        nvcc = nvcc_path()
        front_end = (nvcc_front_end(nvcc, ["-std=c++17", *gencode_flags(arch), f"-I{DEFAULT_INCLUDE}"])
                     if nvcc is not None else None)
        try:
            attach(kernels, source, front_end)
        except Exception:  # a source the reader cannot follow: the report says nothing, as before
            return
        self.found = {m: {"dynamic_shared_bytes": k.dynamic_shared_bytes,
                          "dynamic_shared_optin": k.dynamic_shared_optin, "dynamic_shared": k.dynamic_shared}
                      for m, k in zip(mangled, kernels, strict=True)}

    def attach(self, resources: list[dict[str, object]], timeout_s: float = 30.0) -> None:
        self.thread.join(timeout_s)
        for k in resources:
            k.update(self.found.get(str(k.get("name")), {}))


def baseline_cache_settings(settings: EvalSettings, baseline: Path, naive: Path) -> EvalSettings:
    """The baseline cache is for the problem's own naive baseline only: a kernel timed against
    another one (the judge's re-time of a contender against the leader, `--baseline`) is
    timed side by side with it."""
    if settings.baseline_cache and baseline.resolve() != naive.resolve():
        return replace(settings, baseline_cache=False)
    return settings


def _build_into(box: Future[Any], source: Path, arch: str) -> None:
    try:
        box.set_result(compile_kernel(source, arch=arch))
    except BaseException as exc:  # reported where the result is read
        box.set_exception(exc)


def _give_fresh_fill(job: WorkerJob, build: Future[Any]) -> None:
    """The job carries the harness's fresh-input library with its digest: the worker loads that
    file only if it still has those bytes (harness/worker.py: verified)."""
    try:
        lib = build.result().library
        job.harness_libraries = {**job.harness_libraries, "fresh_fill": {"path": str(lib), "sha256": _sha256(lib)}}
    except Exception:  # the worker builds it itself (or uses torch operations), as before
        pass


def _sha256(library: Path) -> str:
    """The digest the worker checks before it loads the library (harness/worker.py: verified)."""
    from harness.peer_cache import library_digest

    return library_digest(library)


def not_compiled_report(
    kernel: str, baseline: str | None, scenarios: Sequence[Scenario], suite: str,
    info: CompileInfo, reason: str,
) -> EvaluationReport:
    results = [
        ScenarioResult(s.name, s.category, s.hidden, NOT_COMPILED, reason) for s in scenarios
    ]
    return EvaluationReport(
        kernel=kernel, baseline=baseline, gpu="", suite=suite, scenarios=results, compile=info,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )


def evaluate_source(
    source: Path,
    scenarios: Sequence[Scenario],
    *,
    baseline: Path | None = None,
    suite: str = "all",
    settings: EvalSettings | None = None,
    executor: Executor | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    problem_name: str = "attention-forward",
    arch: str | None = None,
) -> EvaluationReport:
    """Compile `source` (and `baseline`, default: the problem's baseline) and evaluate it."""
    settings = settings or EvalSettings()
    own = executor is None
    executor = executor or LocalExecutor()
    if own and isinstance(executor, LocalExecutor) and settings.device == "cuda":
        # The worker process starts and imports torch while nvcc compiles, then prepares for
        # the job (this evaluation owns the GPU: the peers' plans are built meanwhile); closed
        # below if the evaluation ends without it.
        executor.prestart()
        executor.warm(problem_name, scenarios, settings)
    try:
        return _evaluate(source, scenarios, baseline, suite, settings, executor, progress, cancel,
                         problem_name, arch)
    finally:
        if own and isinstance(executor, LocalExecutor):
            executor.close()


def _evaluate(
    source: Path, scenarios: Sequence[Scenario], baseline: Path | None, suite: str,
    settings: EvalSettings, executor: Executor, progress: ProgressFn | None,
    cancel: threading.Event | None, problem_name: str, arch: str | None,
) -> EvaluationReport:
    naive = baseline_source(problem_name)
    baseline = baseline if baseline is not None else naive
    settings = baseline_cache_settings(settings, baseline, naive)
    arch = arch or detect_arch()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    findings = check_source(source.read_text(errors="replace"))
    blocking = [f for f in findings if f.blocking]
    if blocking:
        info = CompileInfo(ok=False, log="\n".join(str(f) for f in findings))
        return not_compiled_report(
            str(source), str(baseline), scenarios, suite, info,
            "static checks refused the kernel: " + "; ".join(str(f) for f in blocking[:3]),
        )
    # The harness's fresh-input kernels, built (or found and verified) here, beside the candidate's
    # build: the worker loads them only with this digest (issue 47: a cache the worker could
    # rewrite is never trusted as it stands).
    fresh_build: Future[Any] | None = None
    if settings.device == "cuda":
        fresh_build = Future()
        threading.Thread(target=_build_into, args=(fresh_build, FRESH_FILL_SOURCE, arch),
                         name="socratic-fresh-fill-build", daemon=True).start()
    try:
        built = compile_kernel(source, arch=arch)
    except CompileError as exc:
        info = CompileInfo(ok=False, log=exc.log)
        return not_compiled_report(
            str(source), str(baseline), scenarios, suite, info, f"compile failed: {exc}"
        )
    from harness.resources import parse_ptxas

    built.info.resources = [asdict(k) for k in parse_ptxas(built.info.log)]
    # The SASS mix (cuobjdump, where it exists) for profiles (harness/profile.py), read in a
    # thread while the worker runs the scenarios: it adds no time to the evaluation.
    sass = SassReader(built.library)
    smem = SmemReader(source.read_text(errors="replace"), built.info.log, arch)
    base_spec = None
    try:
        base_built = compile_kernel(baseline, arch=arch)
        base_spec = KernelSpec("baseline", "library", str(base_built.library),
                               _sha256(base_built.library))
    except CompileError as exc:
        # Without a baseline the candidate is still judged; only speedups vs baseline go.
        built.info.log += f"\n[baseline did not compile: {exc}]\n{exc.log}"
    job = WorkerJob(
        problem=problem_name,
        candidate=KernelSpec(source.name, "library", str(built.library), _sha256(built.library)),
        baseline=base_spec,
        scenarios=list(scenarios),
        settings=settings,
    )
    if fresh_build is not None:
        _give_fresh_fill(job, fresh_build)
    result = executor.run(job, progress, cancel)
    sass.attach(built.info.resources)
    smem.attach(built.info.resources)
    try:
        fill_baseline_cache(job, result.results, executor, cancel, progress)
        fill_error = None
    except Exception as exc:  # the candidate's report is complete; a failed fill only loses the cache
        fill_error = f"{type(exc).__name__}: {exc}"[:300]
    report = EvaluationReport(
        kernel=str(source), baseline=str(baseline) if base_spec else None,
        gpu=str(result.device.get("name", "")), suite=suite, scenarios=result.results,
        compile=built.info, started_at=started_at, seconds=time.monotonic() - t0,
        settings={**settings.to_dict(), "arch": arch, "device_info": result.device,
                  "restarts": result.restarts,
                  **({"baseline_cache_fill_error": fill_error} if fill_error else {})},
    )
    return report


def fill_baseline_cache(job: WorkerJob, results: Sequence[ScenarioResult], executor: Executor,
                        cancel: threading.Event | None, progress: ProgressFn | None = None) -> None:
    """After an evaluation that timed the baseline itself (no cached time), the baseline is
    evaluated alone on those scenarios, in a process with no candidate loaded, and only that
    process writes the cache (harness/peer_cache.py: BaselineCache.writable): a candidate never
    decides the baseline time later evaluations use. Same settings (so the same keys), no peers,
    no profiler; the fill's own report is not kept."""
    st = job.settings
    if job.baseline is None or not st.baseline_cache or not st.measure or (cancel is not None and cancel.is_set()):
        return
    if st.device != "cuda" and not st.baseline_cache_dir:
        return
    timed_here = {r.scenario for r in results if r.baseline_ms is not None and r.baseline_cached_at is None}
    missing = [s for s in job.scenarios if s.name in timed_here]
    if not missing:
        return
    fill = replace(st, peers=(), profile="never")
    total = len(job.scenarios)

    def told(p: Progress) -> None:  # the evaluation's bar stays full; its tail says what runs
        if progress is not None:
            progress(Progress(total, total, p.scenario, None,
                              f"filling the baseline cache {p.done}/{p.total}: {p.scenario}"))

    executor.run(WorkerJob(job.problem, job.baseline, job.baseline, missing, fill), told, cancel)


def evaluate_job(
    job: WorkerJob, *, kernel: str, suite: str = "all", executor: Executor | None = None,
    progress: ProgressFn | None = None, cancel: threading.Event | None = None,
) -> EvaluationReport:
    """Evaluate already-built kernels (used by tests and by callers that compile themselves).
    Setting `cancel` kills the worker processes, as in evaluate_source."""
    executor = executor or LocalExecutor()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    if job.settings.device == "cuda" and "fresh_fill" not in job.harness_libraries:
        # built (or found and verified) here, as evaluate_source does: never the worker's own copy
        build: Future[Any] = Future()
        _build_into(build, FRESH_FILL_SOURCE, detect_arch())
        _give_fresh_fill(job, build)
    result = executor.run(job, progress, cancel)
    return EvaluationReport(
        kernel=kernel, baseline=job.baseline.label if job.baseline else None,
        gpu=str(result.device.get("name", "")), suite=suite, scenarios=result.results,
        compile=CompileInfo(ok=True), started_at=started_at, seconds=time.monotonic() - t0,
        settings={**job.settings.to_dict(), "device_info": result.device,
                  "restarts": result.restarts},
    )
