#!/usr/bin/env bash
# Issue 18's one device call for the Hopper layer's speed knobs: the gallery kernel wgmma-tma-a
# against its setting plus wg_q_stages=2 (Q) and plus wg_wide_d64 (W), all strict builds (a
# call no tensor map describes fails instead of falling back), every ratio side by side:
#   1. W, correctness only, every d64 scenario (the three-consumer path);
#   2. the best variant that step 1 leaves (W, else Q) over all 182, baseline = wgmma-tma-a,
#      cuDNN/flash/FA3 timed live (and kept in a peer cache);
#   3. the other variant over the prefill category, baseline = wgmma-tma-a, peers from the cache.
#   bash scripts/wgmma_variants_gpu.sh OUT
set -uo pipefail
OUT=${1:?output folder}
mkdir -p "$OUT"
K=/tmp/h18k
source scripts/family_gpu_lib.sh
render_strict $K wgmma-tma-a A= Q=wg_q_stages=2 W=wg_q_stages=2,wg_wide_d64=true || exit 1
precompile_all $K A Q W
step w_d64_correct 45 $K/W.cu --filter head_dim=64 --correctness-only --timeout 15
BEST=Q OTHER=W
if python3 -c "
import json, sys
r = json.load(open('$OUT/w_d64_correct.json'))
s = r['scenarios']
sys.exit(0 if s and all(x['status'] == 'pass' for x in s) else 1)"; then BEST=W OTHER=Q; fi
echo "best=$BEST"
left() { echo $((185 - SECONDS)); }  # this call's budget: 185 s (a cold start shares the session's device time)
step "full_$BEST" $(( $(left) - 5 )) $K/$BEST.cu --baseline $K/A.cu --peer-cache /tmp/pc --timeout 30
[ "$(left)" -gt 30 ] && step "prefill_$OTHER" "$(left)" $K/$OTHER.cu --baseline $K/A.cu --filter category=prefill --peer-cache /tmp/pc --timeout 30
python3 scripts/variant_table.py "full_$BEST=$OUT/full_$BEST.json" "prefill_$OTHER=$OUT/prefill_$OTHER.json" \
  | tee "$OUT/table.txt"
