#!/usr/bin/env bash
# Verifier v3 (issue 47) on the GPU machine, in one device call of about 8 minutes:
#   1. pytest -m gpu tests/gpu/test_cheats_gpu.py: every cheat of kernels/cheats/ rejected with the
#      reason of its class (the five of issue 47 included), every honest kernel accepted;
#   2. the cheat -> verdict -> reason table of the reports it kept;
#   3. what the new checks cost honest kernels: each over 10 scenarios with EvalSettings.hardening
#      on and off, interleaved (on, off, off, on), then, if the budget leaves room, the gallery
#      leader's fresh 182-scenario evaluation off then on (same card, same call).
# Usage: bash scripts/verifier_v3_gpu.sh [OUTDIR]   (default /tmp/v3). Wheels the machine lacks may
# travel in .whl-dev as for scripts/gpu_checks.sh. The last lines are the tables.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-/tmp/v3}
WHEELS=${WHEELS:-.whl-dev}
export PYTHONUNBUFFERED=1
if [ -d "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl \
    || { echo "wheel install failed" >&2; exit 1; }
  export PYTHONPATH=$PWD:/tmp/site
else
  export PYTHONPATH=$PWD
fi
mkdir -p "$OUT_DIR/reports"
T0=$SECONDS
echo "=== cheats and honest kernels (pytest -m gpu)"
SOCRATIC_GPU_REPORTS="$OUT_DIR/reports" timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/gpu/test_cheats_gpu.py 2>&1 | tee "$OUT_DIR/pytest.log" | tail -40
PYTEST_RC=${PIPESTATUS[0]}
echo "=== cheat table"
python3 tests/gpu/cheat_table.py --reports "$OUT_DIR/reports" 2>&1 | tee "$OUT_DIR/table.log"
LEFT=$((450 - (SECONDS - T0)))
echo "=== cost of the v3 checks on honest kernels (budget ${LEFT} s)"
if [ "$LEFT" -gt 60 ]; then
  timeout "$LEFT" python3 tests/gpu/cheat_table.py --v3-overhead --gallery --budget-s $((LEFT / 2)) \
    --gallery-budget-s $((LEFT - 80)) 2>&1 | tee "$OUT_DIR/overhead.log"
else
  echo "skipped: the tests took the budget"
fi
echo
echo "=== summary: pytest rc=$PYTEST_RC, ${SECONDS}s in all"
grep -E "passed|failed|error" "$OUT_DIR/pytest.log" | tail -1
cat "$OUT_DIR/table.log"
sed -n '/verifier v3 cost/,$p' "$OUT_DIR/overhead.log" 2>/dev/null
