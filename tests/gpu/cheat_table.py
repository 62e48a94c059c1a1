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
    """Each kept report's verdict and first reason; for a cheat, whether a reason names its hack
    class (the phrase tests/gpu/test_cheats_gpu.py expects)."""
    from tests.gpu.test_cheats_gpu import CHEATS

    rows = []
    for path in sorted(reports.glob("*.json")):
        rep = EvaluationReport.from_dict(json.loads(path.read_text()))
        v = rep.verdict()
        expected = CHEATS.get(path.stem + ".cu")
        named = "-" if expected is None else (
            "yes" if any(expected[1] in reason for reason in v.reasons) else "NO")
        reason = next((r for r in v.reasons if expected and expected[1] in r), v.reasons[0] if v.reasons else "")
        rows.append((path.stem, v.status, named, reason))
    print(f"{'kernel':<26} {'verdict':<9} {'named':<5} reason")
    for name, status, named, reason in rows:
        print(f"{name:<26} {status:<9} {named:<5} {reason[:150]}")


CONFIGS = {  # name -> (integrity checks, profiler policy)
    "on": (True, "auto"),
    "off": (False, "auto"),
    "on, profiler never": (True, "never"),
}


def overhead(budget_s: float, out: Path | None, rounds: int = 2) -> None:
    """Each honest kernel over the same scenarios with the checks on, off, and on without the
    profiler cross-check, in `rounds` rounds whose order alternates, after one discarded warm-up
    evaluation (a machine's first cuDNN plans cost seconds more than later ones, which would
    otherwise be charged to whichever configuration ran first). Prints where the seconds went
    (summed scenario phases) and which scenarios the profiler re-verified, and why."""
    by_name = {s.name: s for s in default_suite()}
    chosen = [by_name[n] for n in OVERHEAD_SCENARIOS]
    started = time.monotonic()
    t0 = time.monotonic()
    evaluate_source(ROOT / "kernels" / "cheats" / OVERHEAD_KERNELS[0], chosen,
                    settings=replace(EvalSettings(), integrity=False))
    print(f"warm-up evaluation (discarded): {time.monotonic() - t0:.1f} s")
    rows: list[dict[str, object]] = []
    for kernel in OVERHEAD_KERNELS:
        walls: dict[str, list[float]] = {name: [] for name in CONFIGS}
        verdicts: dict[str, str] = {}
        for rnd in range(rounds):
            order = list(CONFIGS) if rnd % 2 == 0 else list(reversed(CONFIGS))
            for name in order:
                if time.monotonic() - started > budget_s:
                    break
                integrity, profile = CONFIGS[name]
                settings = replace(EvalSettings(), integrity=integrity, profile=profile)
                t0 = time.monotonic()
                rep = evaluate_source(ROOT / "kernels" / "cheats" / kernel, chosen, settings=settings)
                wall = time.monotonic() - t0
                walls[name].append(wall)
                verdicts[name] = rep.verdict().status
                phases: dict[str, float] = {}
                for r in rep.scenarios:
                    for k, v in r.phases.items():
                        phases[k] = round(phases.get(k, 0.0) + v, 2)
                profiled = [(r.scenario, round(r.speedup_vs_baseline or 0, 1), r.flags[:1])
                            for r in rep.scenarios if "profile" in r.phases]
                print(f"{kernel} [{name}] round {rnd + 1}: {wall:.1f} s, setup "
                      f"{rep.settings['device_info'].get('setup_s')} s, phases {phases}; profiled {profiled}"[:900])
                if rep.verdict().status != "accepted":
                    print(f"{kernel} [{name}]: {rep.verdict()}"[:400])
        mean = {name: sum(w) / len(w) for name, w in walls.items() if w}
        if "on" in mean and "off" in mean:
            never = mean.get("on, profiler never", float("nan"))
            rows.append({"kernel": kernel, "scenarios": len(chosen), "runs": len(walls["on"]),
                         "with_s": round(mean["on"], 1), "without_s": round(mean["off"], 1),
                         "no_profiler_s": round(never, 1), "ratio_wall": round(mean["on"] / mean["off"], 3),
                         "ratio_no_profiler": round(never / mean["off"], 3), "verdict_with": verdicts["on"],
                         "verdict_without": verdicts["off"]})
    print(f"\n{'honest kernel':<24} {'n':>3} {'runs':>4} {'on s':>6} {'off s':>6} {'ratio':>6} {'no-prof s':>9} "
          f"{'ratio':>6}  verdict")
    for row in rows:
        print(f"{row['kernel']:<24} {row['scenarios']:>3} {row['runs']:>4} {row['with_s']:>6} {row['without_s']:>6} "
              f"{row['ratio_wall']:>6} {row['no_profiler_s']:>9} {row['ratio_no_profiler']:>6}  {row['verdict_with']}")
    if out:
        out.write_text(json.dumps(rows, indent=1))


def v3_overhead(budget_s: float, gallery: bool, gallery_budget_s: float) -> None:
    """Verifier v3's cost (issue 47): each honest kernel over OVERHEAD_SCENARIOS with the new
    checks on and off (EvalSettings.hardening: the sandbox, the default-stream fence and checks,
    timed outputs kept at once), interleaved on, off, off, on, ... after a discarded warm-up; then,
    where `gallery` and the budget allows, the gallery leader's fresh evaluation over all 182
    scenarios, off then on (nvcc inside the wall time, cached after the first). Prints a table."""
    by_name = {s.name: s for s in default_suite()}
    chosen = [by_name[n] for n in OVERHEAD_SCENARIOS]
    started = time.monotonic()
    evaluate_source(ROOT / "kernels" / "cheats" / OVERHEAD_KERNELS[0], chosen,
                    settings=replace(EvalSettings(), hardening=False))
    rows: list[tuple[str, int, int, float, float, str, str]] = []
    for kernel in OVERHEAD_KERNELS:
        walls: dict[bool, list[float]] = {True: [], False: []}
        verdicts: dict[bool, str] = {}
        for rnd in range(2):
            for on in ((True, False) if rnd % 2 == 0 else (False, True)):
                if time.monotonic() - started > budget_s:
                    break
                t0 = time.monotonic()
                rep = evaluate_source(ROOT / "kernels" / "cheats" / kernel, chosen,
                                      settings=replace(EvalSettings(), hardening=on))
                walls[on].append(time.monotonic() - t0)
                verdicts[on] = rep.verdict().status
                sandbox = rep.settings.get("device_info", {}).get("sandbox")
                print(f"{kernel} [v3 {'on' if on else 'off'}] round {rnd + 1}: {walls[on][-1]:.1f} s, "
                      f"{verdicts[on]}, sandbox {sandbox}", flush=True)
                if verdicts[on] != "accepted":
                    print(f"  {rep.verdict()}"[:600])
        if walls[True] and walls[False]:
            on_s = sum(walls[True]) / len(walls[True])
            off_s = sum(walls[False]) / len(walls[False])
            rows.append((kernel, len(chosen), len(walls[True]), on_s, off_s, verdicts[True], verdicts[False]))
    if gallery:
        # off first (on a fresh machine it also fills the baseline cache: not compared), then on,
        # then off again: on is compared with the second off, same card, same call.
        leader = ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-n.cu"
        suite = default_suite()
        gallery_walls: dict[str, float] = {}
        for label, on in (("off (fills caches)", False), ("on", True), ("off", False)):
            if time.monotonic() - started > gallery_budget_s:
                print(f"gallery leader [v3 {label}]: skipped, over the budget")
                continue
            t0 = time.monotonic()
            rep = evaluate_source(leader, suite, settings=replace(EvalSettings(), hardening=on))
            gallery_walls[label] = time.monotonic() - t0
            print(f"gallery leader [v3 {label}]: {gallery_walls[label]:.1f} s, {rep.verdict().status}, "
                  f"{sum(r.status == 'pass' for r in rep.scenarios)}/{len(suite)} pass", flush=True)
            for r in rep.scenarios:
                if r.status != "pass":
                    print(f"  {r.scenario}: {r.status}: {r.reason}"[:400], flush=True)
        off = gallery_walls.get("off", gallery_walls.get("off (fills caches)"))
        if "on" in gallery_walls and off:
            which = "off" if "off" in gallery_walls else "off (fills caches)"
            rows.append((f"gallery leader 182 vs {which}", len(suite), 1, gallery_walls["on"], off, "", ""))
    print(f"\n{'verifier v3 cost':<32} {'n':>3} {'runs':>4} {'on s':>7} {'off s':>7} {'ratio':>6}  verdict on/off")
    for name, n, runs, on_s, off_s, v_on, v_off in rows:
        ratio = on_s / off_s if off_s > 0 else float("nan")
        print(f"{name:<32} {n:>3} {runs:>4} {on_s:>7.1f} {off_s:>7.1f} {ratio:>6.3f}  {v_on}/{v_off}")
    print("limits: honest kernels' ratio <= 1.25; gallery leader's fresh 182 <= 1.10")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=Path)
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument("--v3-overhead", action="store_true")
    ap.add_argument("--gallery", action="store_true")
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--gallery-budget-s", type=float, default=200.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.reports:
        table(args.reports)
    if args.overhead:
        overhead(args.budget_s, args.json)
    if args.v3_overhead:
        v3_overhead(args.budget_s, args.gallery, args.gallery_budget_s)


if __name__ == "__main__":
    main()
