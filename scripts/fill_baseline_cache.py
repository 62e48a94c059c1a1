"""Fill the baseline cache (harness/peer_cache.py: BaselineCache) for every scenario of the suite
with the default settings of the checkout on PYTHONPATH, as `socratic eval` does after a run
that timed the baseline itself (harness/evaluate.py: fill_baseline_cache: the baseline evaluated
alone, no peers, in its own process). Not a test: scripts/fresh_eval_gpu.sh runs it in each
checkout it compares, so that every evaluation there starts with the cache warm, as a GPU's
evaluations do after its first one of the day.

    PYTHONPATH=CHECKOUT python3 scripts/fill_baseline_cache.py
"""

from __future__ import annotations

import time

from harness.compile import cache_dir, compile_kernel
from harness.evaluate import detect_arch, fill_baseline_cache
from harness.executor import LocalExecutor
from harness.job import KernelSpec, WorkerJob
from harness.problem_registry import get_problem
from harness.report import PASS, ScenarioResult
from harness.settings import EvalSettings


def main() -> None:
    problem = get_problem("attention-forward")
    built = compile_kernel(problem.baseline_source, arch=detect_arch())
    spec = KernelSpec("baseline", "library", str(built.library))
    scenarios = problem.suite()
    settings = EvalSettings()  # what the CLI's `eval` uses by default: the same cache keys
    job = WorkerJob(problem.name, spec, spec, scenarios, settings)
    # Every scenario as one whose baseline was timed beside the candidate: all are filled.
    timed = [ScenarioResult(scenario=s.name, category=s.category, hidden=s.hidden, status=PASS,
                            baseline_ms=1.0) for s in scenarios]
    t0 = time.monotonic()
    executor = LocalExecutor()
    try:
        fill_baseline_cache(job, timed, executor, None)
    finally:
        executor.close()
    folder = cache_dir().parent / "baseline-times"  # where the worker keeps them on a GPU
    kept = len(list(folder.glob("baseline-*.json"))) if folder.is_dir() else 0
    print(f"baseline cache: {kept} entries in {folder} after {time.monotonic() - t0:.1f} s for "
          f"{len(scenarios)} scenarios (timing settings {settings.timing})")


if __name__ == "__main__":
    main()
