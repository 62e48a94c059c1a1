"""Where the seconds of evaluations went, from their JSON reports (not a test): wall time,
the answer key (its compute time, the worker's wait for it, trials judged in the worker), worker
setup, each scenario phase summed over the suite, the verdict and the geomeans; each
run's timed calls and the timing phase's cost per call beyond their device time; with two or
more reports, the later ones' kernel and peer times over the first's (re-time ratios, with the
worst scenario).

    python3 scripts/eval_phases.py A.json [B.json ...] [--wall A=SECONDS|A=MILLISECONDSms ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python3 scripts/eval_phases.py` from a bare checkout
    sys.path.insert(0, str(ROOT))

from harness.stats import geomean  # noqa: E402

PHASES = ("correctness", "reference", "peers", "timing", "integrity", "profile")


def phase_row(name: str, d: dict[str, Any], wall: str) -> str:
    info = d.get("settings", {}).get("device_info", {})
    totals = {p: sum((s.get("phases") or {}).get(p, 0.0) for s in d["scenarios"]) for p in PHASES}
    cached = sum(s.get("baseline_cached_at") is not None for s in d["scenarios"])
    g = d.get("geomean", {}).get("all", {})
    peers = " ".join(f"{p} {v:.3f}" for p, v in (g.get("vs_peers") or {}).items() if v)
    verdict = (d.get("verdict") or {}).get("status", "?")
    comp = d.get("compile") or {}
    warm = info.get("warm_up") or {}
    key = info.get("answer_key") or {}
    key_cell = (f"{key['seconds']:.1f} / {key['wait_s']:.1f} ({key.get('trials_judged_in_worker', 0)})"
                if "seconds" in key else ("off: " + key["unavailable"][:40] if key else "-"))
    cells = [name, wall, f"{d.get('seconds', 0):.1f}",
             "cached" if comp.get("cached") else f"{comp.get('seconds', 0):.1f}",
             f"{warm['seconds']:.1f} ({warm['scenarios_with_plans']})" if warm else "-",
             key_cell, f"{info.get('setup_s', 0):.1f}",
             *(f"{totals[p]:.1f}" for p in PHASES), str(cached),
             f"{verdict} {g.get('passed')}/{g.get('scenarios')}",
             f"base {g.get('vs_baseline') or 0:.2f} {peers}"]
    return "| " + " | ".join(cells) + " |"


def ratios(first: dict[str, Any], later: dict[str, Any]) -> str:
    a = {s["scenario"]: s for s in first["scenarios"]}
    out = []
    for who in ("kernel", "cudnn", "flash", "fa3"):
        named: dict[str, float] = {}
        for s in later["scenarios"]:
            t = a.get(s["scenario"])
            if t is None:
                continue
            x, y = ((t.get("time_ms"), s.get("time_ms")) if who == "kernel" else
                    ((t["peers"].get(who) or {}).get("time_ms"), (s["peers"].get(who) or {}).get("time_ms")))
            if x and y:
                named[s["scenario"]] = y / x
        r = list(named.values())
        if r:
            within = sum(abs(v - 1) <= 0.10 for v in r)
            worst = max(named, key=lambda n: abs(math.log(named[n])))
            out.append(f"{who} geomean {geomean(r):.4f} range {min(r):.3f}-{max(r):.3f} "
                       f"worst {named[worst]:.3f} ({worst}) within 10% {within}/{len(r)}")
    return "; ".join(out)


def calls_line(name: str, d: dict[str, Any]) -> str:
    """The timed calls of the kernel, the peers and the baseline where this run timed it, from
    each time and the run's timing settings (harness/timing.py: reps_for, plus warm-ups and the
    kernel's wall-clock calls), their device time, and what the timing phase spent per call
    beyond it (flush, hold, fresh inputs, the host; cuDNN's plans in the loop too)."""
    s = d.get("settings", {}).get("timing", {})
    budget, lo, slow_lo = s.get("budget_ms", 10.0), s.get("min_reps", 10), s.get("min_reps_slow", 3)
    slow, hi, warm, wall = s.get("slow_ms", 5.0), s.get("max_reps", 50), s.get("warmup", 2), s.get("wall_reps", 3)
    calls, device = 0, 0.0
    for sc in d["scenarios"]:
        times = [(sc.get("time_ms"), warm + wall)] + [
            (p.get("time_ms"), warm) for p in (sc.get("peers") or {}).values() if not p.get("cached_at")]
        if sc.get("baseline_cached_at") is None:  # timed beside the kernel in this run
            times.append((sc.get("baseline_ms"), warm))
        for ms, extra in times:
            if not ms:
                continue
            reps = max(slow_lo if ms > slow else lo, min(hi, math.ceil(budget / ms)))
            calls += reps + extra
            device += (reps + extra) * ms / 1e3
    timing = sum((sc.get("phases") or {}).get("timing", 0.0) for sc in d["scenarios"])
    per = (timing - device) / calls * 1e3 if calls else float("nan")
    return (f"calls {name}: ~{calls} timed calls, ~{device:.1f} s of their device "
            f"time; the timing phase's {timing:.1f} s leave ~{per:.2f} ms per call besides")


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
    print("| run | wall s | report s | compile | warm-up (plans) | answer key s / wait s (in worker)"
          " | setup | " + " | ".join(PHASES) + " | cached base | verdict | geomeans |")
    print("|" + "---|" * (len(PHASES) + 10))
    for name, d in loaded:
        print(phase_row(name, d, walls.get(name, "-")))
    for name, d in loaded:
        print(calls_line(name, d))
    for name, d in loaded[1:]:
        print(f"re-time {name} / {loaded[0][0]}: {ratios(loaded[0][1], d)}")


if __name__ == "__main__":
    main()
