"""Benchmark of the harness itself (not a test), run on the GPU machine:
1. wall time of a full evaluation (compile cached),
2. the geomean ratio of the same kernel evaluated twice (stability),
3. the kernel's geomean against cuDNN and FA2.

    PYTHONPATH=. python3 scripts/bench_harness.py KERNEL.cu [--filter EXPR] [--json-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.attention.suite import default_suite
from harness.compile import compile_kernel
from harness.evaluate import evaluate_source
from harness.report import EvaluationReport
from harness.settings import EvalSettings
from harness.stats import geomean
from harness.suite import select


def run_once(kernel: Path, filter_expr: str | None) -> tuple[EvaluationReport, float]:
    scenarios = select(default_suite(), "all", filter_expr)
    t0 = time.monotonic()
    report = evaluate_source(kernel, scenarios, settings=EvalSettings())
    return report, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel")
    ap.add_argument("--filter")
    ap.add_argument("--json-dir")
    args = ap.parse_args()
    kernel = Path(args.kernel)
    compile_kernel(kernel)  # warm the compile cache: the target excludes compilation
    first, wall1 = run_once(kernel, args.filter)
    second, wall2 = run_once(kernel, args.filter)
    if args.json_dir:
        Path(args.json_dir).mkdir(parents=True, exist_ok=True)
        Path(args.json_dir, "first.json").write_text(first.to_json())
        Path(args.json_dir, "second.json").write_text(second.to_json())
    pairs = [
        (a.time_ms, b.time_ms)
        for a, b in zip(first.scenarios, second.scenarios, strict=True)
        if a.time_ms and b.time_ms
    ]
    ratios = [b / a for a, b in pairs]
    stability = geomean(ratios)
    worst = max(ratios, key=lambda r: abs(r - 1.0)) if ratios else None
    summary = first.summary("all")
    phases: dict[str, float] = {}
    for r in first.scenarios:
        for k, v in r.phases.items():
            phases[k] = round(phases.get(k, 0.0) + v, 1)
    rows = {
        "scenarios": len(first.scenarios),
        "passed": summary.passed,
        "wall_s_first": round(wall1, 1),
        "wall_s_second": round(wall2, 1),
        "repeat_geomean_ratio": stability,
        "repeat_worst_ratio": worst,
        "geomean_vs_baseline": summary.vs_baseline,
        "geomean_vs_cudnn": summary.vs_peers.get("cudnn"),
        "geomean_vs_flash": summary.vs_peers.get("flash"),
        "geomean_tflops": summary.tflops,
        "gpu": first.gpu,
        "worker_setup_s": first.settings.get("device_info", {}).get("setup_s"),
        "phase_seconds_first": phases,
    }
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
