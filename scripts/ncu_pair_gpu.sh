#!/usr/bin/env bash
# Issue 18's profiles: a kernel and FA3 side by side under Nsight Compute, one launch each (the
# third call of scripts/ncu_drive.py), per scenario. For each (kernel, scenario) it keeps in OUT:
#   NAME.details.csv   the sections' metrics (ncu --page details --csv)
#   NAME.src.csv.gz    the source page with SASS (ncu --page source --csv --print-source sass)
#   NAME.ledger.txt    where the warps wait (scripts/ncu_ledger.py on the source page)
# and prints, per scenario, duration, tensor pipe ("SM Busy"), DRAM throughput, L2 hit rate and
# instructions of both. The reports themselves are deleted (tens of MB each).
#   bash scripts/ncu_pair_gpu.sh OUT kernels/attention/gallery/wgmma-tma-g.cu prefill-d256-s512-b32-h8-full ...
set -uo pipefail
OUT=${1:?output folder}; KERNEL=${2:?kernel .cu}; shift 2
[ $# -gt 0 ] || { echo "name at least one scenario" >&2; exit 2; }
mkdir -p "$OUT"
source scripts/family_gpu_lib.sh
SECTIONS=()
for s in SourceCounters WarpStateStats InstructionStats ComputeWorkloadAnalysis MemoryWorkloadAnalysis \
         SpeedOfLight LaunchStats Occupancy; do SECTIONS+=(--section "$s"); done
metrics='"(Duration|SM Busy|DRAM Throughput|L2 Hit Rate|Executed Instructions)"'
for sc in "$@"; do
  echo "== $sc"
  for w in "$KERNEL" fa3; do
    tag=$(basename "$w" .cu)-$sc
    timeout 120 ncu --kernel-name-base demangled -k regex:"FlashAttnFwd|attn_fwd_sm90|attn_fwd" \
      --launch-skip 2 --launch-count 1 "${SECTIONS[@]}" -o "$OUT/$tag" \
      python3 scripts/ncu_drive.py "$w" "$sc" > "$OUT/$tag.log" 2>&1 || { echo "  $tag: ncu failed"; tail -3 "$OUT/$tag.log"; continue; }
    ncu -i "$OUT/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/$tag.src.csv" 2>/dev/null
    ncu -i "$OUT/$tag.ncu-rep" --page details --csv > "$OUT/$tag.details.csv" 2>/dev/null
    python3 scripts/ncu_ledger.py "$OUT/$tag.src.csv" > "$OUT/$tag.ledger.txt" 2>&1
    gzip -f "$OUT/$tag.src.csv"; rm -f "$OUT/$tag.ncu-rep"
    printf '  %-16s' "$(basename "$w" .cu)"
    grep -E "$metrics" "$OUT/$tag.details.csv" | awk -F'","' '{gsub(/"/, "", $NF); printf " %s %s %s |", $(NF-2), $(NF-1), $NF}'
    echo
  done
done
