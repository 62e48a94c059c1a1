#!/usr/bin/env bash
# Issue 18's device call for the Hopper kernel's scheduling knobs: the gallery kernel (B, default
# wgmma-tma-c; GALLERY=NAME for another) against its setting plus each variant NAME=CHANGES given
# (key=value,...), all strict builds (a call no tensor map describes fails instead of falling back),
# each over all 182 scenarios with B as the baseline (timed interleaved in the same process); the
# first variant's step times cuDNN/flash/FA3 live (its report is what a gallery file carries) and
# keeps them in a peer cache for the others. Without variants, stop 26's first call:
#   D  = wg_scheduler=dynamic (causal tiles past the first wave claimed from a counter by the CTA
#        that is free first, instead of every gridDim.x-th tile),
#   DL = D with wg_l2_sections=32 (the host-sized sections of stop 24 had not run on the GPU).
# Then a table per category and head dim (scripts/variant_table.py) and the rows the scheduling
# knobs should move (causal GQA at tp4/tp8, long causal prefill, ragged causal, chunked) as x B and
# x FA3.
#   bash scripts/wgmma_scheduler_gpu.sh OUT [BUDGET_S [NAME=CHANGES ...]]
set -uo pipefail
OUT=${1:?output folder}
BUDGET=${2:-330}
mkdir -p "$OUT"
K=/tmp/h18s
source scripts/family_gpu_lib.sh
shift $(( $# < 2 ? $# : 2 ))
SPECS=("$@")
[ ${#SPECS[@]} -eq 0 ] && SPECS=(D=wg_scheduler=dynamic DL=wg_scheduler=dynamic,wg_l2_sections=32)
VARIANTS=$(for s in "${SPECS[@]}"; do printf '%s ' "${s%%=*}"; done)
render_strict $K "${GALLERY:-wgmma-tma-c}" B= "${SPECS[@]}" || exit 1
precompile_all $K B $VARIANTS
left() { echo $((BUDGET - SECONDS)); }
n=$(echo $VARIANTS | wc -w)
for v in $VARIANTS; do  # the first step (live peers) takes about twice the others' time
  n=$((n - 1))
  step "full_$v" $(( $(left) * 2 / (n + 2) - 3 )) $K/$v.cu --baseline $K/B.cu --peer-cache /tmp/pc --timeout 30
done
{
  args=(); for v in $VARIANTS; do args+=("full_$v=$OUT/full_$v.json"); done
  python3 scripts/variant_table.py "${args[@]}"
  GALLERY_NAME="${GALLERY:-wgmma-tma-c}" python3 - "$OUT" $VARIANTS <<'PY'
import json, math, os, sys
from pathlib import Path
out = Path(sys.argv[1])
reps = {f"full_{n}": json.loads((out / f"full_{n}.json").read_text()) for n in sys.argv[2:]
        if (out / f"full_{n}.json").exists()}
rows = {n: {s["scenario"]: s for s in r["scenarios"]} for n, r in reps.items()}
def geo(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
groups = {
    "causal (all but decode)": lambda s: s.endswith("-causal") or s.startswith("chunk-"),
    "full (no mask)": lambda s: s.endswith("-full"),
    "gqa causal tp4/tp8": lambda s: s.startswith("gqa-") and ("-tp4-" in s or "-tp8-" in s) and s.endswith("causal"),
    "prefill causal s4096+": lambda s: s.startswith("prefill-") and s.endswith("causal")
    and int(s.split("-")[2][1:]) >= 4096,
    "ragged causal": lambda s: s.startswith("ragged-") and s.endswith("causal"),
    "chunked": lambda s: s.startswith("chunk-"),
}
print(f"x B ({os.environ['GALLERY_NAME']}, same process) / x FA3 (B's own x FA3 in brackets), geomeans")
for label, keep in groups.items():
    cells = []
    for n, r in rows.items():
        sel = [s for k, s in r.items() if keep(k)]
        xb = geo(s.get("speedup_vs_baseline") for s in sel)
        xf = geo((s.get("speedup_vs_peers") or {}).get("fa3") for s in sel)
        bf = geo(((s.get("peers") or {}).get("fa3") or {}).get("time_ms", 0) / s["baseline_ms"]
                 for s in sel if s.get("baseline_ms"))
        cells.append(f"{n} {xb:.3f} / {xf:.3f} [{bf:.3f}] ({len(sel)})")
    print(f"  {label:<26} " + "   ".join(cells))
PY
} | tee "$OUT/table.txt"
