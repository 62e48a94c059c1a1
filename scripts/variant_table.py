"""A short table of evaluation reports side by side (issue 18's device runs): per category the
pass count and geomean ratios vs each peer and vs the report's baseline, then prefill per head
dim, then d128 prefill TFLOP/s per size. With --rounds, one line per arm whose reports are
repeated runs (rounds) against the same baseline: the geomean x baseline per category and per head
dim, round by round ("r1/r2/..."), so that an arm reads against its own spread and a null arm's.

    python3 scripts/variant_table.py NAME=REPORT.json [NAME=REPORT.json ...]
    python3 scripts/variant_table.py --rounds NAME=R1.json,R2.json [NAME=R1.json,R2.json ...]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python3 scripts/variant_table.py` from a bare checkout
    sys.path.insert(0, str(ROOT))

from harness.stats import geomean  # noqa: E402


def _geo(values: Iterable[float | None]) -> float:
    """The geomean of the values the reports have (None: a ratio or rate a failed scenario
    lacks), NaN where there are none."""
    found = geomean(v for v in values if v is not None)
    return float("nan") if found is None else found


def _rows(report: dict[str, Any], keep: Callable[[dict[str, Any]], bool]) -> str:
    rows = [s for s in report["scenarios"] if keep(s)]
    ok = sum(s["status"] == "pass" for s in rows)
    peers = {p: _geo((s.get("speedup_vs_peers") or {}).get(p) for s in rows) for p in ("cudnn", "flash", "fa3")}
    base = _geo(s.get("speedup_vs_baseline") for s in rows)
    tf = _geo(s.get("tflops") for s in rows)
    return (f"{ok:>3}/{len(rows):<3} cud {peers['cudnn']:.3f} fl {peers['flash']:.3f} fa3 {peers['fa3']:.3f} "
            f"base {base:.3f} TF {tf:.0f}")


def _head_dims() -> dict[str, int]:
    """Each suite scenario's head dim by name (the reports do not carry it)."""
    from harness.attention.suite import default_suite

    return {s.name: s.head_dim for s in default_suite()}


def rounds_table(arms: dict[str, list[dict[str, Any]]]) -> str:
    """Per arm, the geomean x baseline of each round, over all scenarios, per category (the
    categories any round has, each round's own scenarios), then per head dim (d64, d128, d256:
    the suite's scenarios among them, whatever their category)."""
    dims = _head_dims()
    groups: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [("all", lambda s: True)]
    cats = sorted({s["category"] for reps in arms.values() for rep in reps for s in rep["scenarios"]})
    groups += [(c, lambda s, c=c: s["category"] == c) for c in cats]
    seen = {dims.get(s["scenario"]) for reps in arms.values() for rep in reps for s in rep["scenarios"]}
    groups += [(f"d{d}", lambda s, d=d: dims.get(s["scenario"]) == d) for d in (64, 128, 256) if d in seen]
    head = f"{'arm':<8} " + " ".join(f"{g:>17}" for g, _ in groups)
    lines = [head]
    for name, reps in arms.items():
        cells = []
        for _, keep in groups:
            vals = [_geo(s.get("speedup_vs_baseline") for s in rep["scenarios"] if keep(s)) for rep in reps]
            cells.append("/".join(f"{v:.3f}" for v in vals))
        lines.append(f"{name:<8} " + " ".join(f"{x:>17}" for x in cells))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--rounds":
        arms: dict[str, list[dict[str, Any]]] = {}
        for arg in argv[1:]:
            name, _, paths = arg.partition("=")
            reps = []
            for path in paths.split(","):
                try:
                    with open(path) as fh:
                        reps.append(json.load(fh))
                except (OSError, ValueError) as exc:
                    print(f"{name}: no report {path} ({exc})")
            if reps:
                arms[name] = reps
        print("x baseline (timed in the same process), geomean per round r1/r2/...")
        print(rounds_table(arms))
        return 0
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
