#!/usr/bin/env bash
# The fresh evaluation's cost on a GPU machine (docs/harness.md "What an evaluation costs now"):
# a kernel over all 182 scenarios, each evaluation a new `python -m harness eval` process with
# no peer cache (cuDNN, flash and FA3 timed side by side), the compile cache warm, the wall time
# taken around the process. Optionally the same first with another checkout (BEFORE, e.g. main)
# for a before/after table with each scenario's kernel and peer times after over before (the
# re-time ratios: what a change of the timing settings does to stability), and the later runs
# of this checkout over its first (run-to-run stability).
#   bash scripts/fresh_eval_gpu.sh OUT [KERNEL] [RUNS] [BEFORE_DIR]
# Environment: WHEELS (default wheels/): a folder of wheels to install first (FA3's);
# FILL=1 (default) fills the baseline cache of each checkout first (its own timing
# settings are its own keys; scripts/fill_baseline_cache.py), so every evaluation below starts
# warm, as on a GPU after its first evaluation of the day; FILL=0: the first run of this
# checkout fills it, the next ones take the baseline's time from it. LIMIT_S (default 390): a
# run of this checkout after the first starts only while the call has that long left to go,
# assuming it takes as long as the first did. COMPILE=1: then one more run per checkout on a
# copy of the kernel that differs by a comment, so that nvcc runs inside the measured wall time
# (what an agent's every new candidate costs: the compile, then the evaluation; the worker's
# warm-up overlaps the two where the checkout has one).
set -uo pipefail
OUT=${1:?output folder}
KERNEL=$(realpath "${2:-kernels/attention/gallery/fa2-mma-a.cu}")
RUNS=${3:-3}
BEFORE=${4:+$(realpath "$4")}
FILL=${FILL:-1}
LIMIT_S=${LIMIT_S:-390}
mkdir -p "$OUT"
HERE=$PWD
SITE=/tmp/site
# FA3 (the third peer) where the machine lacks it: $WHEELS (default wheels/) of the checkout,
# or the shared folder.
WHLS=$(ls "${WHEELS:-wheels}"/*.whl 2>/dev/null || ls shared/device-wheels/fa3_fwd-*.whl 2>/dev/null)
if [ -n "$WHLS" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" $WHLS || exit 1
fi
export PYTHONUNBUFFERED=1
export SOCRATIC_CACHE_DIR=${SOCRATIC_CACHE_DIR:-/tmp/socratic-cache}
CACHE_ROOT=$SOCRATIC_CACHE_DIR
# Each checkout its own cache folder: both key the baseline's time alike (same library, same
# settings), so in one shared folder the checkout filled last overwrote the other's entries, and
# the v3 harness rejects the older harness's unsigned ones (device info cache_rejected: 182 on the
# H100, 2026-12-06: "after" then timed the baseline itself and refilled the cache inside its wall).
cache_of() { if [ "$1" = "$HERE" ]; then echo "$CACHE_ROOT"; else echo "$CACHE_ROOT-before"; fi; }
for dir in "$HERE" ${BEFORE:+"$BEFORE"}; do rm -rf "$(cache_of "$dir")/baseline-times"; done
# The libraries every run maps (torch, cuDNN, FA3) read once into the page cache, so that the
# first run measured does not pay the machine's cold disk for the others.
PYTHONPATH=$SITE python3 - <<'EOF' | xargs -0 -r cat > /dev/null 2>&1
import importlib.util, os, sys
paths = []
for name in ("torch", "nvidia", "fa3_fwd_interface"):
    spec = importlib.util.find_spec(name)
    if spec is None:
        continue
    if spec.submodule_search_locations:  # a package: every library under it
        for root in spec.submodule_search_locations:
            for folder, _, files in os.walk(root):
                paths += [os.path.join(folder, f) for f in files if ".so" in f]
    elif spec.origin:  # a module: its own libraries beside it
        folder = os.path.dirname(spec.origin)
        paths += [os.path.join(folder, f) for f in os.listdir(folder)
                  if f.startswith(("fa3", "flash_attn_3")) and ".so" in f]
sys.stdout.write("".join(p + "\0" for p in paths))
EOF
# This checkout draws a timed call's fresh inputs in place; its check regenerates them with
# fresh_qkv: the two must agree bit for bit on this GPU, or every timed call would read as wrong.
PYTHONPATH=$HERE:$SITE python3 -c "
import torch
from harness.attention.fresh import DISTRIBUTIONS, fresh_qkv, write_fresh_qkv
from harness.attention.fresh_fill import for_device
from harness.attention.forward import AttentionForward
from harness.scenario import Scenario
dev, p = torch.device('cuda'), AttentionForward()
s = Scenario('gqa', 'x', 3, 77, 1031, 8, 2, 128, causal=True)
bad = []
for seed in (0, 1):
    inputs = p.make_inputs(s, seed, dev)
    for dist in DISTRIBUTIONS:
        write_fresh_qkv(s, 12345 + seed, dist, inputs, for_device(dev))
        again = fresh_qkv(s, 12345 + seed, dist, dev)
        bad += [(seed, dist)] if not all(torch.equal(a, b) for a, b in zip(again, inputs)) else []
print('fresh inputs in place equal fresh_qkv on the GPU:', 'yes' if not bad else f'NO {bad}', '(' + for_device(dev).why + ')')
"
for dir in "$HERE" ${BEFORE:+"$BEFORE"}; do  # each checkout's own shim and flags: no run pays for nvcc
  (cd "$dir" && export SOCRATIC_CACHE_DIR=$(cache_of "$dir") && PYTHONPATH=$dir:$SITE python3 -c "
from pathlib import Path
from harness.evaluate import precompile
print('precompiled', precompile(Path('$KERNEL')), precompile(Path('kernels/attention/baseline.cu')))")
  if [ "$FILL" = 1 ]; then
    # the checkout's own fill script where it has one: module names differ between checkouts
    fill=$dir/scripts/fill_baseline_cache.py; [ -f "$fill" ] || fill=$HERE/scripts/fill_baseline_cache.py
    (cd "$dir" && export SOCRATIC_CACHE_DIR=$(cache_of "$dir") && PYTHONPATH=$dir:$SITE python3 "$fill") 2>&1 | tail -1
  fi
done
WALLS=()
LAST_S=0
timed_eval() {  # NAME DIR
  local name=$1 dir=$2 s e
  s=$(date +%s%N)
  (cd "$dir" && export SOCRATIC_CACHE_DIR=$(cache_of "$dir") && PYTHONPATH=$dir:$SITE python3 -m harness eval "$KERNEL" --json "$OUT/$name.json" \
     > "$OUT/$name.log" 2>&1)
  e=$(date +%s%N)
  LAST_S=$(( (e - s) / 1000000000 ))
  WALLS+=("$name=$(( (e - s) / 1000000 ))ms")
  tail -4 "$OUT/$name.log"
}
if [ -n "$BEFORE" ]; then timed_eval before "$BEFORE"; fi
REPORTS=()
[ -n "$BEFORE" ] && REPORTS+=("$OUT/before.json")
FIRST_S=0
for i in $(seq 1 "$RUNS"); do
  if [ "$i" -gt 1 ] && [ $(( SECONDS + FIRST_S )) -gt "$LIMIT_S" ]; then
    echo "after$i not run: ${SECONDS} s used, the last run took ${FIRST_S} s, limit ${LIMIT_S} s"
    break
  fi
  timed_eval "after$i" "$HERE"
  [ "$i" -eq 1 ] && FIRST_S=$LAST_S
  REPORTS+=("$OUT/after$i.json")
done
if [ "${COMPILE:-0}" = 1 ]; then
  for dir in ${BEFORE:+"$BEFORE"} "$HERE"; do
    name=$([ "$dir" = "$HERE" ] && echo afterC || echo beforeC)
    copy=/tmp/$name-$(basename "$KERNEL")
    { cat "$KERNEL"; echo "// $name $(date +%s%N): a new source, so nvcc compiles it"; } > "$copy"
    KERNEL_SAVED=$KERNEL; KERNEL=$copy
    timed_eval "$name" "$dir"
    KERNEL=$KERNEL_SAVED
    REPORTS+=("$OUT/$name.json")
  done
fi
python3 scripts/eval_phases.py "${REPORTS[@]}" --wall "${WALLS[@]}" | tee "$OUT/table.md"
AFTER=("${REPORTS[@]}")
[ -n "$BEFORE" ] && AFTER=("${REPORTS[@]:1}")
[ "${COMPILE:-0}" = 1 ] && AFTER=("${AFTER[@]:0:${#AFTER[@]}-$([ -n "$BEFORE" ] && echo 2 || echo 1)}")
if [ "${#AFTER[@]}" -gt 1 ]; then  # run to run, this checkout only
  python3 scripts/eval_phases.py "${AFTER[@]}" | grep '^re-time' | tee -a "$OUT/table.md"
fi
echo "call total ${SECONDS} s"
