#!/usr/bin/env bash
# Issue 18's device call for wg_l2_sections (heavy first inside L2-sized sections of (head, batch,
# split) units): the gallery kernel wgmma-tma-b (B) against its setting plus wg_l2_sections=32
# (L) and =16 (M), all strict builds (a call no tensor map describes fails instead of falling
# back), every ratio side by side in one process per step:
#   1. L over the prefill category, baseline = B, cuDNN/flash/FA3 timed live (kept in a peer cache);
#   2. L over all 182 (correctness of every scenario; timing vs B, prefill peers from the cache);
#   3. M over the prefill category, baseline = B, peers from the cache;
# then a table: per category and head dim (scripts/variant_table.py), and the short prefill rows
# (d128/d256, s512-s2048) as TFLOP/s of L, B, cuDNN and FA3. Budget: 240 s for the whole call.
#   bash scripts/wgmma_l2_sections_gpu.sh OUT
set -uo pipefail
OUT=${1:?output folder}
mkdir -p "$OUT"
K=/tmp/h18l
source scripts/family_gpu_lib.sh
render_strict $K wgmma-tma-b B= L=wg_l2_sections=32 M=wg_l2_sections=16 || exit 1
precompile_all $K B L M
left() { echo $((240 - SECONDS)); }
step prefill_L $(( $(left) - 10 )) $K/L.cu --baseline $K/B.cu --filter category=prefill --peer-cache /tmp/pc --timeout 30
step full_L $(( $(left) - 35 )) $K/L.cu --baseline $K/B.cu --peer-cache /tmp/pc --timeout 30
step prefill_M $(( $(left) - 3 )) $K/M.cu --baseline $K/B.cu --filter category=prefill --peer-cache /tmp/pc --timeout 30
{
  python3 scripts/variant_table.py "prefill_L=$OUT/prefill_L.json" "full_L=$OUT/full_L.json" "prefill_M=$OUT/prefill_M.json"
  python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
reps = {n: json.loads((out / f"{n}.json").read_text()) for n in ("prefill_L", "prefill_M") if (out / f"{n}.json").exists()}
print("short prefill TFLOP/s (L = wg_l2_sections=32, M = 16, B = wgmma-tma-b, same process as each):")
print(f"  {'scenario':<34} {'L':>5} {'B':>5} {'M':>5} {'B':>5} {'cuDNN':>5} {'FA3':>5} {'L/B':>5}")
rows = {n: {s["scenario"]: s for s in r["scenarios"]} for n, r in reps.items()}
short = [f"prefill-d{d}-s{q}-" for d in (128, 256) for q in (512, 1024, 2048)]
names = sorted({s for r in rows.values() for s in r if any(s.startswith(p) for p in short)},
               key=lambda n: (int(n.split("-")[1][1:]), int(n.split("-")[2][1:]), n))
def tf(s, key="tflops"):
    if s is None:
        return "-"
    if key == "base":
        ms = s.get("baseline_ms")
        return f"{s['flops'] / ms / 1e9:.0f}" if ms else "-"
    v = s.get(key) if key == "tflops" else ((s.get("peers") or {}).get(key) or {}).get("tflops")
    return f"{v:.0f}" if v else "-"
for n in names:
    sl, sm = rows.get("prefill_L", {}).get(n), rows.get("prefill_M", {}).get(n)
    ratio = sl.get("speedup_vs_baseline") if sl else None
    print(f"  {n:<34} {tf(sl):>5} {tf(sl, 'base'):>5} {tf(sm):>5} {tf(sm, 'base'):>5} "
          f"{tf(sl, 'cudnn'):>5} {tf(sl, 'fa3'):>5} {ratio or 0:>5.3f}")
PY
} | tee "$OUT/table.txt"
