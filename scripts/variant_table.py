"""A short table of evaluation reports side by side (issue 18's device runs): per category the
pass count and geomean ratios vs each peer and vs the report's baseline, then prefill per head
dim, then d128 prefill TFLOP/s per size.

    python3 scripts/variant_table.py NAME=REPORT.json [NAME=REPORT.json ...]
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any


def _geo(values: Iterable[float]) -> float:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")


def _rows(report: dict[str, Any], keep: Callable[[dict[str, Any]], bool]) -> str:
    rows = [s for s in report["scenarios"] if keep(s)]
    ok = sum(s["status"] == "pass" for s in rows)
    peers = {p: _geo((s.get("speedup_vs_peers") or {}).get(p) or 0 for s in rows) for p in ("cudnn", "flash", "fa3")}
    base = _geo(s.get("speedup_vs_baseline") or 0 for s in rows)
    tf = _geo(s.get("tflops") or 0 for s in rows)
    return (f"{ok:>3}/{len(rows):<3} cud {peers['cudnn']:.3f} fl {peers['flash']:.3f} fa3 {peers['fa3']:.3f} "
            f"base {base:.3f} TF {tf:.0f}")


def main(argv: list[str]) -> int:
    reports = {}
    for arg in argv:
        name, _, path = arg.partition("=")
        try:
            with open(path) as fh:
                reports[name] = json.load(fh)
        except (OSError, ValueError) as exc:
            print(f"{name}: no report ({exc})")
    for name, rep in reports.items():
        cats = sorted({s["category"] for s in rep["scenarios"]})
        print(f"== {name}: {rep.get('kernel')} vs baseline {rep.get('baseline')}")
        print(f"  {'all':<12} " + _rows(rep, lambda s: True))
        for c in cats:
            print(f"  {c:<12} " + _rows(rep, lambda s, c=c: s["category"] == c))
        for d in (64, 128, 256):
            tag = f"prefill-d{d}-"
            if any(s["scenario"].startswith(tag) for s in rep["scenarios"]):
                print(f"  {'prefill d' + str(d):<12} " + _rows(rep, lambda s, t=tag: s["scenario"].startswith(t)))
        d128 = [s for s in rep["scenarios"] if s["scenario"].startswith("prefill-d128-")]
        if d128:
            print("  d128 TF/s: " + " ".join(
                f"{s['scenario'].split('-')[2]}{'c' if s['scenario'].endswith('causal') else 'f'}="
                f"{(s.get('tflops') or 0):.0f}" for s in d128))
        bad = [s["scenario"] + ":" + s["status"] for s in rep["scenarios"] if s["status"] != "pass"]
        if bad:
            print("  NOT PASSED: " + ", ".join(bad[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
