#!/usr/bin/env bash
# The fresh evaluation's cost on a GPU machine (docs/harness.md "What an evaluation costs"):
# a kernel over all 182 scenarios, each evaluation a new `python -m harness eval` process with
# no peer cache (cuDNN, flash and FA3 timed side by side), the compile cache warm, the wall time
# taken around the process. Optionally the same first with another checkout (BEFORE, e.g. main)
# for a before/after table. The first run of this checkout fills the baseline cache, the next
# ones take the baseline's time from it.
#   bash scripts/fresh_eval_gpu.sh OUT [KERNEL] [RUNS] [BEFORE_DIR]
set -uo pipefail
OUT=${1:?output folder}
KERNEL=$(realpath "${2:-kernels/attention/gallery/fa2-mma-a.cu}")
RUNS=${3:-3}
BEFORE=${4:-}
mkdir -p "$OUT"
HERE=$PWD
SITE=/tmp/site
if ls wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" wheels/*.whl || exit 1
fi
export PYTHONUNBUFFERED=1
export SOCRATIC_CACHE_DIR=${SOCRATIC_CACHE_DIR:-/tmp/socratic-cache}
rm -rf "$SOCRATIC_CACHE_DIR/baseline-times"  # the first run of this checkout fills it, as said above
for dir in "$HERE" ${BEFORE:+"$BEFORE"}; do  # each checkout's own shim and flags: no run pays for nvcc
  (cd "$dir" && PYTHONPATH=$dir:$SITE python3 -c "
from pathlib import Path
from harness.evaluate import precompile
print('precompiled', precompile(Path('$KERNEL')), precompile(Path('kernels/attention/baseline.cu')))")
done
WALLS=()
timed_eval() {  # NAME DIR
  local name=$1 dir=$2 s e
  s=$(date +%s%N)
  (cd "$dir" && PYTHONPATH=$dir:$SITE python3 -m harness eval "$KERNEL" --json "$OUT/$name.json" \
     > "$OUT/$name.log" 2>&1)
  e=$(date +%s%N)
  WALLS+=("$name=$(( (e - s) / 1000000 ))ms")
  tail -4 "$OUT/$name.log"
}
if [ -n "$BEFORE" ]; then timed_eval before "$BEFORE"; fi
for i in $(seq 1 "$RUNS"); do timed_eval "after$i" "$HERE"; done
REPORTS=()
[ -n "$BEFORE" ] && REPORTS+=("$OUT/before.json")
for i in $(seq 1 "$RUNS"); do REPORTS+=("$OUT/after$i.json"); done
python3 scripts/eval_phases.py "${REPORTS[@]}" --wall "${WALLS[@]}" | tee "$OUT/table.md"
