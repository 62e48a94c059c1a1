#!/usr/bin/env bash
# Issue 18's device call for the decode tile (decode_kv_warps: warps splitting each block's keys,
# merged at the end of the tile): the gallery kernel wgmma-tma-b (B) against its setting plus each
# variant NAME=CHANGES given (key=value,...), all strict builds, each over the 33 decode scenarios
# with B as the baseline (timed interleaved in the same process) and cuDNN/flash/FA3 timed live in
# the first step, from its peer cache after; every scenario is checked for correctness on the way.
# Without variants, the first round (2026-12-01):
#   K2 = decode_kv_warps=2, K4 = decode_kv_warps=4,
#   K4S3 = K4 with stages=3 (the decode tile's third K/V stage; tile_d256=64x32x4 so that the
#          mma.sync main tile, which the Hopper layer never runs, still fits three stages),
#   T2K2 = decode_tile=32x64x2 with 2 key warps (a 32-row tile: llama3-70b's q4 x 8 heads in one),
#   N32S3 = decode_tile=16x32x1, 2 key warps, 3 stages (smaller stages: two CTAs per SM at d256).
# GALLERY=NAME: another gallery kernel as B (default wgmma-tma-b).
# FULL=1: then the variant with the best decode geomean over B runs all 182 scenarios with B as
# the baseline and the three peers timed live (no peer cache): the gallery's report.
# Then a table per variant and per model.
#   [FULL=1] bash scripts/decode_kv_warps_gpu.sh OUT [BUDGET_S [NAME=CHANGES ...]]
set -uo pipefail
OUT=${1:?output folder}
BUDGET=${2:-240}
mkdir -p "$OUT"
K=/tmp/h18d
source scripts/family_gpu_lib.sh
shift $(( $# < 2 ? $# : 2 ))
SPECS=("$@")
if [ ${#SPECS[@]} -eq 0 ]; then
  SPECS=(K2=decode_kv_warps=2 K4=decode_kv_warps=4 K4S3=decode_kv_warps=4,stages=3,tile_d256=64x32x4
         T2K2=decode_tile=32x64x2,decode_kv_warps=2
         N32S3=decode_tile=16x32x1,decode_kv_warps=2,stages=3,tile_d256=64x32x4)
fi
VARIANTS=$(for s in "${SPECS[@]}"; do printf '%s ' "${s%%=*}"; done)
render_strict $K "${GALLERY:-wgmma-tma-b}" B= "${SPECS[@]}" || exit 1
precompile_all $K B $VARIANTS
left() { echo $((BUDGET - SECONDS)); }
RESERVE=0; [ "${FULL:-0}" = 1 ] && RESERVE=110  # the full run's time, kept back from the decode steps
for v in $VARIANTS; do
  step "decode_$v" $(( $(left) - RESERVE - 3 )) $K/$v.cu --baseline $K/B.cu --filter category=decode --peer-cache /tmp/pc --timeout 30
done
if [ "${FULL:-0}" = 1 ]; then
  BEST=$(python3 - "$OUT" $VARIANTS <<'PY'
import json, math, sys
from pathlib import Path
best, score = None, 0.0
for n in sys.argv[2:]:
    f = Path(sys.argv[1]) / f"decode_{n}.json"
    if not f.exists():
        continue
    s = json.loads(f.read_text())["scenarios"]
    r = [x.get("speedup_vs_baseline") or 0 for x in s]
    if s and all(x["status"] == "pass" for x in s) and all(v > 0 for v in r):
        g = math.exp(sum(map(math.log, r)) / len(r))
        if g > score:
            best, score = n, g
print(best or "")
PY
)
  for s in "${SPECS[@]}"; do [ "${s%%=*}" = "$BEST" ] && echo "full: $s"; done
  [ -n "$BEST" ] && step "full_$BEST" $(( $(left) - 3 )) $K/$BEST.cu --baseline $K/B.cu --timeout 30
fi
{
  args=(); for v in $VARIANTS; do args+=("$v=$OUT/decode_$v.json"); done
  [ -n "${BEST:-}" ] && args+=("full_$BEST=$OUT/full_$BEST.json")
  python3 scripts/variant_table.py "${args[@]}"
  python3 - "$OUT" $VARIANTS <<'PY'
import json, math, sys
from pathlib import Path
out, names = Path(sys.argv[1]), sys.argv[2:]
reps = {n: json.loads((out / f"decode_{n}.json").read_text()) for n in names if (out / f"decode_{n}.json").exists()}
def geo(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
models = ("llama3-8b", "llama3-70b", "gemma2-9b")
print("decode per model: x B (the gallery kernel, same process) / x FA3, geomeans")
print(f"  {'variant':<7} " + " ".join(f"{m:>17}" for m in models))
for n, r in reps.items():
    cells = []
    for m in models:
        rows = [s for s in r["scenarios"] if f"-{m}-" in s["scenario"]]
        cells.append(f"{geo(s.get('speedup_vs_baseline') for s in rows):.3f} / "
                     f"{geo((s.get('speedup_vs_peers') or {}).get('fa3') for s in rows):.3f}")
    print(f"  {n:<7} " + " ".join(f"{c:>17}" for c in cells))
PY
} | tee "$OUT/table.txt"
