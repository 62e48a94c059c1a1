"""Whether the default-stream fence keeps the ratios to the peers symmetric, on a GPU.

Verifier v3 fences the legacy and per-thread default streams into timed calls (harness/device.py:
time_call_guarded). When only the candidate's calls were fenced, the fence's few microseconds were
in its time and in no peer's, and an H100 read the gallery leader at 0.964x FA3 where the harness
without the fence read 1.00x. Now every timed call is fenced (harness/timing.py: stream_guards), so
x FA3 and x cuDNN should read the same with the hardening on (fenced) and off (nothing fenced),
while each implementation's own time moves by the fence's cost.

This evaluates one kernel with the peers timed side by side, hardening on and off interleaved
(on, off, off, on, ...; a discarded warm-up first), and prints per run x FA3, x cuDNN, x baseline
and the geomean times, then the on/off ratios of the means. Short calls show the fence's cost
most, so the default scenarios are the decode category.

    PYTHONPATH=. python3 scripts/fence_symmetry_gpu.py [--kernel K.cu] [--filter category=decode] [--rounds 2]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PEERS = ("fa3", "cudnn")


QUANTITIES = ("x_fa3", "x_cudnn", "x_baseline", "kernel_ms", "fa3_ms", "cudnn_ms")


def _num(v: float | None) -> str:
    return "-" if v is None or v != v else f"{v:.4f}"  # a peer that timed nothing reads "-", not a crash


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    from harness.attention.suite import default_suite
    from harness.evaluate import evaluate_source
    from harness.settings import EvalSettings
    from harness.suite import select

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel", type=Path, default=ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-n.cu")
    p.add_argument("--filter", default="category=decode")
    p.add_argument("--rounds", type=int, default=2, help="each round is one on/off pair, alternating its order")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1 (each round is one on/off pair)")
    if not args.kernel.is_file():
        p.error(f"--kernel {args.kernel}: no such file")
    scenarios = select(default_suite(), "all", args.filter)
    if not scenarios:
        p.error(f"--filter {args.filter!r} chooses no scenario")
    base = EvalSettings(peers=PEERS)
    evaluate_source(args.kernel, scenarios[:4], settings=base)  # warm-up: nvcc, the peers' first calls
    rows: list[dict[str, Any]] = []
    order = [h for r in range(args.rounds) for h in ((True, False) if r % 2 == 0 else (False, True))]
    for hardening in order:
        report = evaluate_source(args.kernel, scenarios, settings=replace(base, hardening=hardening))
        summary = report.summary("all")
        ok = [s for s in report.scenarios if s.status == "pass" and s.time_ms
              and all(s.peers.get(n) and s.peers[n].time_ms for n in PEERS)]
        rows.append({"hardening": hardening, "gpu": report.gpu, "passed": f"{summary.passed}/{summary.scenarios}",
                     "x_baseline": summary.vs_baseline, **{f"x_{n}": summary.vs_peers.get(n) for n in PEERS},
                     "kernel_ms": geomean([s.time_ms for s in ok if s.time_ms]),
                     **{f"{n}_ms": geomean([s.peers[n].time_ms or 0.0 for s in ok]) for n in PEERS}})
        r = rows[-1]
        print(f"hardening {'on ' if hardening else 'off'} {r['passed']} "
              + "  ".join(f"{k} {_num(r[k])}" for k in QUANTITIES), flush=True)

    def mean(key: str, on: bool) -> float | None:
        values = [float(r[key]) for r in rows if r["hardening"] is on and r[key]]
        return sum(values) / len(values) if values else None  # None: no passed run timed it

    print(f"\nfence symmetry on {rows[0]['gpu']}, {args.kernel.name}, {args.filter} ({len(scenarios)} scenarios), "
          f"{args.rounds} on/off pairs")
    print("| quantity | on (fenced) | off | on / off |")
    print("|---|---|---|---|")
    for key in QUANTITIES:
        on, off = mean(key, True), mean(key, False)
        print(f"| {key} | {_num(on)} | {_num(off)} | {_num(on / off if on and off else None)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
