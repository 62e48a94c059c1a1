"""On the GPU machine, after tests/gpu/test_cheats_gpu.py: the cheat -> verdict -> reason table
of the reports it kept, and what the integrity checks cost honest kernels (each evaluated over
the same scenarios with the checks on and off).

    SOCRATIC_GPU_REPORTS=/tmp/r python3 -m pytest -q -m gpu tests/gpu/test_cheats_gpu.py
    PYTHONPATH=. python3 tests/gpu/cheat_table.py --reports /tmp/r --overhead
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from harness.attention.suite import default_suite
from harness.evaluate import evaluate_source
from harness.report import EvaluationReport
from harness.settings import EvalSettings

ROOT = Path(__file__).resolve().parents[2]
OVERHEAD_KERNELS = ["honest_wmma_tiles.cu", "honest_split_kv.cu"]
OVERHEAD_SCENARIOS = [
    "prefill-d128-s1024-b16-h16-causal", "prefill-d64-s512-b32-h32-full",
    "prefill-d256-s1024-b16-h8-causal", "gqa-llama3-8b-tp8-s4096-b2-causal",
    "chunk-llama3-70b-tp8-q256-k8192", "decode-llama3-8b-tp1-q1-b32-k4096",
    "decode-gemma2-9b-tp1-q4-b32-k4096", "ragged-d128-q1000-k1000-causal",
    "ragged-d256-q500-k777-causal", "ragged-d64-q2049-k4097-causal",
]


def table(reports: Path) -> None:
    rows = []
    for path in sorted(reports.glob("*.json")):
        rep = EvaluationReport.from_dict(json.loads(path.read_text()))
        v = rep.verdict()
        rows.append((path.stem, v.status, v.reasons[0] if v.reasons else ""))
    print(f"{'kernel':<26} {'verdict':<9} reason")
    for name, status, reason in rows:
        print(f"{name:<26} {status:<9} {reason[:150]}")


def overhead(budget_s: float, out: Path | None) -> None:
    by_name = {s.name: s for s in default_suite()}
    chosen = [by_name[n] for n in OVERHEAD_SCENARIOS]
    started = time.monotonic()
    rows = []
    for kernel in OVERHEAD_KERNELS:
        seconds: dict[bool, tuple[float, float, str]] = {}
        per: dict[bool, dict[str, float]] = {}
        for integrity in (True, False):
            if time.monotonic() - started > budget_s:
                break
            settings = replace(EvalSettings(), integrity=integrity)
            t0 = time.monotonic()
            rep = evaluate_source(ROOT / "kernels" / "cheats" / kernel, chosen, settings=settings)
            wall = time.monotonic() - t0
            scen = sum(r.seconds for r in rep.scenarios)
            seconds[integrity] = (wall, scen, rep.verdict().status)
            per[integrity] = {r.scenario: r.seconds for r in rep.scenarios}
            if rep.verdict().status != "accepted":
                print(f"{kernel} integrity={integrity}: {rep.verdict()}"[:400])
        if len(seconds) == 2:
            (w1, s1, v1), (w0, s0, v0) = seconds[True], seconds[False]
            slowest = sorted(per[True], key=lambda n: per[False].get(n, 0) - per[True][n])[:3]
            print(f"{kernel}: largest extra seconds " + ", ".join(
                f"{n} {per[True][n]:.2f}/{per[False].get(n, 0):.2f}" for n in slowest))
            rows.append({"kernel": kernel, "scenarios": len(chosen), "with_s": round(w1, 1),
                         "without_s": round(w0, 1), "ratio_wall": round(w1 / w0, 3),
                         "ratio_scenarios": round(s1 / s0, 3), "verdict_with": v1,
                         "verdict_without": v0})
    print(f"\n{'honest kernel':<24} {'n':>3} {'with s':>7} {'w/o s':>7} {'ratio':>6} "
          f"{'ratio (scenario time)':>22}  verdict")
    for r in rows:
        print(f"{r['kernel']:<24} {r['scenarios']:>3} {r['with_s']:>7} {r['without_s']:>7} "
              f"{r['ratio_wall']:>6} {r['ratio_scenarios']:>22}  {r['verdict_with']}")
    if out:
        out.write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=Path)
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.reports:
        table(args.reports)
    if args.overhead:
        overhead(args.budget_s, args.json)


if __name__ == "__main__":
    main()
