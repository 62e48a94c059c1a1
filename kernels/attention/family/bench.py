"""Evaluate several family kernels through the project's harness in one process, and turn a
harness JSON report into the gallery's per-category table.

On the GPU machine:
    python3 -m kernels.attention.family.bench --subset tune --out $OUT a.cu b.cu
    python3 -m kernels.attention.family.bench --table report.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.stats import geomean

# One or two scenarios of every kind: head dims, causal or not, GQA, chunked, decode, ragged.
TUNE_SUBSET = (
    "prefill-d64-s2048-b8-h32-full",
    "prefill-d64-s8192-b2-h32-causal",
    "prefill-d128-s512-b32-h16-causal",
    "prefill-d128-s4096-b4-h16-full",
    "prefill-d128-s16384-b1-h16-causal",
    "prefill-d256-s2048-b8-h8-full",
    "prefill-d256-s8192-b2-h8-causal",
    "gqa-llama3-70b-tp8-s8192-b1-causal",
    "gqa-qwen2.5-7b-tp1-s4096-b2-full",
    "gqa-gemma2-9b-tp4-s4096-b2-causal",
    "chunk-llama3-8b-tp1-q256-k65536",
    "chunk-llama3-70b-tp8-q256-k8192",
    "chunk-llama3-70b-tp8-q2048-k32768",
    "chunk-llama3-8b-tp1-q1024-k16384",
    "decode-llama3-8b-tp1-q1-b1-k32768",
    "decode-llama3-8b-tp1-q4-b128-k1024",
    "decode-llama3-70b-tp8-q1-b64-k8192",
    "decode-gemma2-9b-tp1-q4-b8-k16384",
    "decode-gemma2-9b-tp1-q1-b32-k4096",
    "ragged-d64-q77-k77-causal",
    "ragged-d128-q113-k203-causal",
    "ragged-d256-q239-k1-full",
    "ragged-d64-q799-k3-full",
    "ragged-d128-q3001-k3001-full",
    "ragged-d256-q2049-k4097-causal",
    "ragged-d256-q1023-k1024-causal",
)

CATEGORIES = ("prefill", "gqa", "chunked", "decode", "ragged")


def geomean_of_present(values: Iterable[float | None]) -> float | None:
    """harness.stats.geomean over the values a report has: None (a peer that did not run, a ratio a
    failed scenario lacks) is dropped here, in sight; anything else must be positive and finite."""
    return geomean(v for v in values if v is not None)


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def category_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per category: scenarios, passed, geomean TFLOP/s of the kernel and of each peer, and the
    geomeans of the per-scenario ratios to each peer and to the baseline; plus an `all` row."""
    scen = report["scenarios"]
    rows = []
    for cat in (*CATEGORIES, "all"):
        items = [s for s in scen if cat == "all" or s["category"] == cat]
        if not items:
            continue
        passed = [s for s in items if s["status"] == "pass"]

        def peer(s: dict[str, Any], name: str) -> float | None:
            p = s.get("peers", {}).get(name)
            return p.get("tflops") if p and p.get("status") == "ok" else None

        rows.append({
            "category": cat,
            "scenarios": len(items),
            "passed": len(passed),
            "tflops": geomean_of_present(s.get("tflops") for s in passed),
            "cudnn_tflops": geomean_of_present(peer(s, "cudnn") for s in items),
            "flash_tflops": geomean_of_present(peer(s, "flash") for s in items),
            "fa3_tflops": geomean_of_present(peer(s, "fa3") for s in items),
            "vs_cudnn": geomean_of_present(s.get("speedup_vs_peers", {}).get("cudnn") for s in passed),
            "vs_flash": geomean_of_present(s.get("speedup_vs_peers", {}).get("flash") for s in passed),
            "vs_fa3": geomean_of_present(s.get("speedup_vs_peers", {}).get("fa3") for s in passed),
            "vs_baseline": geomean_of_present(s.get("speedup_vs_baseline") for s in passed),
        })
    return rows


def markdown_table(report: dict[str, Any], label: str) -> str:
    """The gallery README's table; the FA3 columns where the report timed FA3."""
    rows = category_rows(report)
    fa3 = any(r["fa3_tflops"] is not None for r in rows)
    cols = ["category", "scenarios", "correct", f"{label} TFLOP/s", "cuDNN TFLOP/s",
            "FA2 (torch flash) TFLOP/s", *(["FA3 TFLOP/s"] if fa3 else []), "x cuDNN", "x FA2",
            *(["x FA3"] if fa3 else []), "x baseline"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [r["category"], str(r["scenarios"]), str(r["passed"]), _fmt(r["tflops"]),
                 _fmt(r["cudnn_tflops"]), _fmt(r["flash_tflops"]),
                 *([_fmt(r["fa3_tflops"])] if fa3 else []), _fmt(r["vs_cudnn"], ".3f"),
                 _fmt(r["vs_flash"], ".3f"), *([_fmt(r["vs_fa3"], ".3f")] if fa3 else []),
                 _fmt(r["vs_baseline"], ".3f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scenario_lines(report: dict[str, Any]) -> list[str]:
    out = []
    for s in report["scenarios"]:
        cud = s.get("speedup_vs_peers", {}).get("cudnn")
        out.append(f"{s['scenario']:<44} {s['status']:<8} {_fmt(s.get('tflops')):>7} "
                   f"x{_fmt(cud, '.2f'):>5} {s.get('reason', '')[:60]}")
    return out


def run(kernels: Sequence[Path], names: Sequence[str] | None, out: Path, peers: bool,
        timeout: float, budget_ms: float) -> int:
    from harness.attention.suite import default_suite
    from harness.evaluate import evaluate_source
    from harness.settings import EvalSettings
    from harness.timing import TimingSettings

    suite = default_suite()
    chosen = [s for s in suite if names is None or s.name in names]
    settings = EvalSettings(
        peers=("cudnn", "flash") if peers else (),
        timing=TimingSettings(budget_ms=budget_ms),
        scenario_timeout_s=timeout,
    )
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for k in kernels:
        report = evaluate_source(k, chosen, settings=settings)
        data = json.loads(report.to_json())
        (out / f"{k.stem}.json").write_text(report.to_json())
        rows = {r["category"]: r for r in category_rows(data)}
        print(f"== {k.name}  compile ok={report.compile.ok}", flush=True)
        if not report.compile.ok:
            print(report.compile.log[-3000:], flush=True)
        for line in scenario_lines(data):
            print("  " + line, flush=True)
        summary.append((k.stem, rows))
    print("\nkernel".ljust(40) + "pass  " + "  ".join(f"{c:>8}" for c in (*CATEGORIES, "all")) + "  x_base")
    for name, rows in summary:
        a = rows.get("all", {})
        cells = "  ".join(f"{_fmt(rows.get(c, {}).get('tflops')):>8}" for c in (*CATEGORIES, "all"))
        print(f"{name[:38]:<38} {a.get('passed', 0):>3}/{a.get('scenarios', 0):<3} {cells}  "
              f"{_fmt(a.get('vs_baseline'))}  cudnn {_fmt(a.get('vs_cudnn'), '.3f')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.attention.family.bench")
    p.add_argument("kernels", nargs="*", type=Path)
    p.add_argument("--subset", choices=("tune", "all"), default="tune")
    p.add_argument("--out", type=Path, default=Path("family-bench"))
    p.add_argument("--peers", action="store_true", help="also time torch SDPA cuDNN and flash")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--budget-ms", type=float, default=20.0)
    p.add_argument("--table", type=Path, help="print the gallery table of a harness JSON report")
    args = p.parse_args(argv)
    if args.table:
        data = json.loads(args.table.read_text())
        print(markdown_table(data, args.table.stem))
        return 0
    names = TUNE_SUBSET if args.subset == "tune" else None
    return run(args.kernels, names, args.out, args.peers, args.timeout, args.budget_ms)


if __name__ == "__main__":
    sys.exit(main())
