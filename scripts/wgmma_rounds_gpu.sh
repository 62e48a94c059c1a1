#!/usr/bin/env bash
# Issue 18's device call for small knob effects, read against their spread (stop 27). The gallery
# kernel's setting (GALLERY, default wgmma-tma-n) with BASE changes (key=value,..., default none)
# is the baseline B; N is a copy of B (the null arm: what "no change" measures); each NAME=CHANGES
# is an arm. All strict builds (a call no tensor map describes fails instead of falling back).
#   1. B against itself with cuDNN, FA2 and FA3 timed live over the scenarios FILTER selects
#      (harness --filter, default all 182), which fills the peer cache for the rounds;
#   2. ROUNDS rounds (default 2), the arms in reverse order every other round, each arm's run
#      against B timed interleaved in the same process, peers from the cache;
#   3. the table: per arm and category the geomean x B of each round (variant_table.py --rounds).
# An arm's effect is real where its rounds agree and sit outside the null arm's spread.
#   GALLERY=wgmma-tma-d FILTER=category=decode bash scripts/wgmma_rounds_gpu.sh OUT 300 D=wg_decode=wgmma
#   bash scripts/wgmma_rounds_gpu.sh OUT [BUDGET_S [NAME=CHANGES ...]]
set -uo pipefail
OUT=${1:?output folder}
BUDGET=${2:-300}
mkdir -p "$OUT"
K=/tmp/h18r
source scripts/family_gpu_lib.sh
shift $(( $# < 2 ? $# : 2 ))
SPECS=("$@")
ARMS="N"; for s in "${SPECS[@]}"; do ARMS="$ARMS ${s%%=*}"; done
BASE=${BASE:-}
render_strict $K "${GALLERY:-wgmma-tma-n}" "B=$BASE" "N=$BASE" \
  $(for s in "${SPECS[@]}"; do n=${s%%=*}; c=${s#*=}; printf '%s ' "$n=${BASE:+$BASE,}$c"; done) || exit 1
precompile_all $K B $ARMS
FILT=(); [ -n "${FILTER:-}" ] && FILT=(--filter "$FILTER")
step live $(( BUDGET / 3 )) $K/B.cu --baseline $K/B.cu "${FILT[@]}" --peer-cache /tmp/pc --timeout 30
for r in $(seq 1 "${ROUNDS:-2}"); do
  order=$ARMS; [ $((r % 2)) = 0 ] && order=$(echo $ARMS | tr ' ' '\n' | tac | tr '\n' ' ')
  for v in $order; do
    left=$((BUDGET - SECONDS)); [ $left -lt 20 ] && break 2
    step "r${r}_$v" $left $K/$v.cu --baseline $K/B.cu "${FILT[@]}" --peer-cache /tmp/pc --timeout 30
  done
done
args=(); for v in $ARMS; do
  files=$(ls "$OUT"/r*_"$v".json 2>/dev/null | sort | paste -sd, -)
  [ -n "$files" ] && args+=("$v=$files")
done
python3 scripts/variant_table.py --rounds "${args[@]}" | tee "$OUT/table.txt"
