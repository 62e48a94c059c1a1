"""On the GPU machine: how stable the harness's times are. Evaluates one kernel twice over the
same scenarios (two fresh worker processes, peers timed side by side in each) and prints, per
scenario, the ratio of the second time to the first for the kernel and each peer, then the
geomean ratio and the worst scenario. Target (issue 13): geomean within 1.00 +- 0.02, every
scenario within +-10%.

    PYTHONPATH=. python3 tests/gpu/retime.py kernels/attention/gallery/fa2-mma-a.cu \\
        --filter '*1024*' --filter 'gqa-*-tp8-*' --json OUT
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from harness.attention.suite import default_suite
from harness.evaluate import evaluate_source
from harness.report import EvaluationReport, render_geomeans
from harness.settings import EvalSettings
from harness.stats import geomean
from harness.suite import select


def ratios(a: EvaluationReport, b: EvaluationReport, who: str) -> dict[str, float]:
    def times(rep: EvaluationReport) -> dict[str, float]:
        out = {}
        for r in rep.scenarios:
            t = r.time_ms if who == "kernel" else (r.peers[who].time_ms if who in r.peers else None)
            if t:
                out[r.scenario] = t
        return out

    ta, tb = times(a), times(b)
    return {name: tb[name] / ta[name] for name in ta if name in tb}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel", type=Path)
    ap.add_argument("--filter", action="append", default=None,
                    help="as socratic eval's --filter; repeat it for the union of several")
    ap.add_argument("--suite", default="all")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    wanted = {s.name for f in (args.filter or [None]) for s in select(default_suite(), args.suite, f)}
    chosen = [s for s in default_suite() if s.name in wanted]
    print(f"{len(chosen)} scenarios")
    reports = []
    for run in (1, 2):
        rep = evaluate_source(args.kernel, chosen, settings=EvalSettings())
        reports.append(rep)
        print(f"run {run}: {rep.seconds:.1f} s, verdict {rep.verdict()}"[:300])
        print("\n".join(render_geomeans(rep)[:3]))
        if args.json:
            args.json.with_suffix(f".run{run}.json").write_text(rep.to_json())
    a, b = reports
    summary = {}
    print(f"\n{'scenario':<44} {'kernel':>7} {'cudnn':>7} {'flash':>7} {'fa3':>7}")
    per = {who: ratios(a, b, who) for who in ("kernel", "cudnn", "flash", "fa3")}
    for name in per["kernel"]:
        cells = " ".join(f"{per[w][name]:>7.3f}" if name in per[w] else f"{'-':>7}"
                         for w in ("kernel", "cudnn", "flash", "fa3"))
        print(f"{name:<44.44} {cells}")
    for who, values in per.items():
        if not values:
            continue
        gm = geomean(values.values()) or 0.0
        worst = max(values, key=lambda n: abs(math.log(values[n])))
        within = sum(0.9 <= v <= 1.1 for v in values.values())
        summary[who] = {"geomean": round(gm, 4), "worst": worst, "worst_ratio": round(values[worst], 4),
                        "within_10pct": within, "scenarios": len(values)}
        print(f"{who:<7} geomean ratio {gm:.4f}  worst {values[worst]:.3f} ({worst})  "
              f"within +-10%: {within}/{len(values)}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "ratios": per}, indent=1))


if __name__ == "__main__":
    main()
