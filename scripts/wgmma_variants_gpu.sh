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
export PYTHONUNBUFFERED=1 SOCRATIC_CACHE_DIR=${SOCRATIC_CACHE_DIR:-/tmp/socratic-cache}
if ls wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site wheels/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site
K=/tmp/h18k
mkdir -p $K
python3 - "$K" <<'PY' || exit 1
import sys
from pathlib import Path
from kernels.attention.family.render import render
from kernels.attention.family.space import parse_knobs
out = Path(sys.argv[1])
gallery = Path("kernels/attention/gallery")
base = parse_knobs(str(gallery / "wgmma-tma-a.knobs.json"))
strict = "#define SOCRATIC_SM90_TMA_STRICT 1\n"
settings = {"A": base, "Q": base.replace(wg_q_stages=2), "W": base.replace(wg_q_stages=2, wg_wide_d64=True)}
assert render(base) == (gallery / "wgmma-tma-a.cu").read_text()
for name, k in settings.items():
    (out / f"{name}.cu").write_text(strict + render(k.validate()))
    print(name, k.slug()[-40:])
PY
t0=$SECONDS
for n in A Q W; do
  python3 -c "from pathlib import Path; from harness.evaluate import precompile; print('$n', precompile(Path('$K/$n.cu')))" &
done
wait
echo "compiled in $((SECONDS - t0)) s"
step() {  # NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2
  local t=$SECONDS
  echo "=== $name: $*"
  timeout "$limit" python3 -m harness eval "$@" --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $((SECONDS - t)) s"; tail -3 "$OUT/$name.log"
}
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
