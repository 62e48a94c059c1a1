"""Where a worker's scenario time goes, below the report's phases (not a test; GPU machine).

One process: the device, the problem, every peer's plans built first (as a compile long enough
leaves them), then the kernel evaluated over the suite twice by one ScenarioEvaluator with the
references judged here (no answer key), no baseline (a real evaluation takes its time from the
cache). Pass 1 wraps the harness's own steps in host timers (inclusive seconds per step and
category, with the calls counted; `synchronize` and the tensor reads that wait for the device
are the host's idle time); pass 2 runs under cProfile and lists the host's hottest functions.

    PYTHONPATH=. python3 scripts/worker_breakdown_gpu.py KERNEL.cu [--filter EXPR] [--no-profile]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import harness.attention.fresh as fresh
import harness.timing as timing
import harness.worker as worker
from harness.attention.suite import default_suite
from harness.compile import compile_kernel
from harness.device import make_device
from harness.evaluate import detect_arch
from harness.job import KernelSpec
from harness.problem_registry import get_problem
from harness.settings import EvalSettings
from harness.suite import select

SECONDS: dict[tuple[str, str], float] = defaultdict(float)
CALLS: dict[tuple[str, str], int] = defaultdict(int)
CATEGORY = ["-"]


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SECONDS[(name, CATEGORY[0])] += time.perf_counter() - t0
            CALLS[(name, CATEGORY[0])] += 1
    return wrapper


def wrap(owner: Any, attr: str, name: str | None = None) -> Callable[[], None]:
    """Time `owner.attr` (a name this checkout lacks is left alone: the script serves several)."""
    if not hasattr(owner, attr):
        return lambda: None
    original = getattr(owner, attr)
    setattr(owner, attr, timed(name or attr, original))
    return lambda: setattr(owner, attr, original)


def instrument(device: Any) -> list[Callable[[], None]]:
    undo = []
    ev = worker.ScenarioEvaluator
    for attr in ("evaluate", "_time", "_check_timed", "_check_stream_tail", "_probe",
                 "_rerun_validated", "_check_persisting_l2", "_prepare_upcoming_peers",
                 "_check_profile", "_run_candidate", "_refresh_peer_set", "_poison_workspace",
                 "_prepare", "_check_inputs"):
        undo.append(wrap(ev, attr, f"ev.{attr}"))
    undo.append(wrap(worker, "time_interleaved"))
    for attr in ("wall_clock_per_call", "wall_clock_against_control"):
        undo.append(wrap(timing, attr))
    for attr in ("synchronize", "flush_cache", "hold", "time_call", "stream_tail", "marker",
                 "release_memory"):
        undo.append(wrap(device, attr, f"dev.{attr}"))
    t = fresh.AttentionTimedInputs
    for attr in ("before_call", "keep_last", "gather", "draw_rows", "probe", "restore",
                 "references"):
        undo.append(wrap(t, attr, f"fresh.{attr}"))
    for attr in ("measure_calls", "fresh_qkv", "attention_rows_reference", "write_fresh_qkv",
                 "timed_reason"):
        undo.append(wrap(fresh, attr, f"fresh.{attr}"))
    fill = getattr(fresh, "FreshFill", None)
    for attr in ("fill", "rows", "take"):
        undo.append(wrap(fill, attr, f"fill.{attr}"))
    for attr in ("tolist", "item"):
        undo.append(wrap(torch.Tensor, attr, f"tensor.{attr}"))
    return undo


def table(categories: list[str]) -> str:
    names = sorted({n for n, _ in SECONDS}, key=lambda n: -sum(SECONDS[(n, c)] for c in categories))
    head = "| step | calls | " + " | ".join(categories) + " | all s |"
    lines = [head, "|" + "---|" * (len(categories) + 3)]
    for n in names:
        cells = [f"{SECONDS[(n, c)]:.2f}" for c in categories]
        lines.append(f"| {n} | {sum(CALLS[(n, c)] for c in categories)} | " + " | ".join(cells)
                     + f" | {sum(SECONDS[(n, c)] for c in categories):.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel")
    ap.add_argument("--filter")
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    kernel = Path(args.kernel)
    settings = EvalSettings()
    scenarios = select(default_suite(), "all", args.filter)
    device = make_device("cuda")
    problem = get_problem("attention-forward")
    built = compile_kernel(kernel, arch=detect_arch())
    candidate = problem.load_kernel(KernelSpec(kernel.name, "library", str(built.library)))
    plans = worker.PeerPlans(problem, device, settings)
    t0 = time.monotonic()
    for _ in worker._plan_builds(problem, settings, scenarios, plans):
        pass
    device.synchronize()
    print(f"plans for {len(plans)} scenarios in {time.monotonic() - t0:.1f} s", flush=True)
    if hasattr(problem, "harness_kernels"):
        print("harness kernels:", problem.harness_kernels(device.torch_device), flush=True)
    rates = worker._rates_for(device, settings)
    evaluator = worker.ScenarioEvaluator(problem, device, candidate, None, settings, rates, None,
                                         None, plans)
    evaluator.reset_persisting_l2()
    categories = sorted({s.category for s in scenarios}, key=[s.category for s in scenarios].index)

    def one_pass() -> tuple[float, dict[str, float], int]:
        phases: dict[str, float] = defaultdict(float)
        passed = 0
        start = time.monotonic()
        for i, s in enumerate(scenarios):
            evaluator.upcoming = scenarios[i + 1:]
            CATEGORY[0] = s.category
            r = evaluator.evaluate(s)
            passed += r.status == "pass"
            if r.status != "pass" or r.flags:
                print(f"  {s.name}: {r.status} {r.reason[:400]} {r.flags}", flush=True)
            for k, v in r.phases.items():
                phases[k] += v
        CATEGORY[0] = "-"
        return time.monotonic() - start, phases, passed

    undo = instrument(device)
    wall, phases, passed = one_pass()
    for u in reversed(undo):
        u()
    print(f"\npass 1 (timers): {wall:.1f} s, {passed}/{len(scenarios)} passed; phases "
          + " ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    print(table(categories))
    if args.no_profile:
        return
    prof = cProfile.Profile()
    prof.enable()
    wall, phases, passed = one_pass()
    prof.disable()
    print(f"\npass 2 (cProfile): {wall:.1f} s, {passed}/{len(scenarios)} passed; phases "
          + " ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    for key in ("tottime", "cumtime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(35)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[-5000:])


if __name__ == "__main__":
    main()
