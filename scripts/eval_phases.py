"""Where the seconds of evaluations went, from their JSON reports (not a test): wall time,
worker setup, each scenario phase summed over the suite, the verdict and the geomeans; with
two or more reports, the later ones' kernel and peer times over the first's (re-time ratios).

    python3 scripts/eval_phases.py A.json [B.json ...] [--wall A=SECONDS|A=MILLISECONDSms ...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

PHASES = ("correctness", "reference", "peers", "timing", "integrity", "profile")


def _geo(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def phase_row(name: str, d: dict[str, Any], wall: str) -> str:
    info = d.get("settings", {}).get("device_info", {})
    totals = {p: sum((s.get("phases") or {}).get(p, 0.0) for s in d["scenarios"]) for p in PHASES}
    cached = sum(s.get("baseline_cached_at") is not None for s in d["scenarios"])
    g = d.get("geomean", {}).get("all", {})
    peers = " ".join(f"{p} {v:.3f}" for p, v in (g.get("vs_peers") or {}).items() if v)
    verdict = (d.get("verdict") or {}).get("status", "?")
    cells = [name, wall, f"{d.get('seconds', 0):.1f}", f"{info.get('setup_s', 0):.1f}",
             *(f"{totals[p]:.1f}" for p in PHASES), str(cached),
             f"{verdict} {g.get('passed')}/{g.get('scenarios')}",
             f"base {g.get('vs_baseline') or 0:.2f} {peers}"]
    return "| " + " | ".join(cells) + " |"


def ratios(first: dict[str, Any], later: dict[str, Any]) -> str:
    a = {s["scenario"]: s for s in first["scenarios"]}
    out = []
    for who in ("kernel", "cudnn", "flash", "fa3"):
        r = []
        for s in later["scenarios"]:
            t = a.get(s["scenario"])
            if t is None:
                continue
            x, y = ((t.get("time_ms"), s.get("time_ms")) if who == "kernel" else
                    ((t["peers"].get(who) or {}).get("time_ms"), (s["peers"].get(who) or {}).get("time_ms")))
            if x and y:
                r.append(y / x)
        if r:
            within = sum(abs(v - 1) <= 0.10 for v in r)
            out.append(f"{who} geomean {_geo(r):.4f} range {min(r):.3f}-{max(r):.3f} "
                       f"within 10% {within}/{len(r)}")
    return "; ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--wall", nargs="*", default=[], help="NAME=SECONDS measured around the CLI")
    args = ap.parse_args()
    walls = {}
    for w in args.wall:
        name, _, value = w.partition("=")
        walls[name] = f"{float(value[:-2]) / 1e3:.1f}" if value.endswith("ms") else value
    loaded = [(Path(p).stem, json.loads(Path(p).read_text())) for p in args.reports]
    print("| run | wall s | report s | setup | " + " | ".join(PHASES)
          + " | cached base | verdict | geomeans |")
    print("|" + "---|" * (len(PHASES) + 7))
    for name, d in loaded:
        print(phase_row(name, d, walls.get(name, "-")))
    for name, d in loaded[1:]:
        print(f"re-time {name} / {loaded[0][0]}: {ratios(loaded[0][1], d)}")


if __name__ == "__main__":
    main()
