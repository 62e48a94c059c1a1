#!/usr/bin/env bash
# The GPU proofs in as few device calls as possible, on the lent H200 (no registry there).
# Wheels the machine lacks travel in an ignored folder (default .whl-dev: the web stack,
# distributed, fa3-fwd; see docs/harness.md "Running on the GPU machine"):
#
#   bash scripts/gpu_checks.sh OUTDIR verifier gallery     # first call
#   bash scripts/gpu_checks.sh OUTDIR tests                # second call
#
# Parts: verifier (cheat table, checks' overhead, fa2-mma-a timed twice over all 182),
# gallery (wgmma-ws-a over all 182 with every peer), tests (pytest -m gpu over TESTS, default
# tests/gpu), cluster (two workers on one GPU, the whole suite sharded; GPUS=0,1 puts them on
# two GPUs), campaigns (issue 15's experiment, three seeds, one per GPU at once; EVALUATIONS,
# SEEDS, ARMS and DEADLINE_S override it), judge182 (issue 50's all-182 leader #39 from its
# trace, on all 182 with FA3, cuDNN, FA2 and the gallery leader timed beside it), all182 (a new
# seed of the all-182 arm: SEED, DEADLINE_S; then its leader's final on all 182). Each part's
# log lands in OUTDIR; a table last. WHEELS may name several folders (WHEELS=".carry-web .carry-fa3": a call carries
# at most 64 MiB, so the proofs' carry leaves psycopg and distributed out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: gpu_checks.sh OUTDIR PART...}
shift
WHEELS=${WHEELS:-.whl-dev}
export PYTHONUNBUFFERED=1
read -r -a WHEEL_DIRS <<< "$WHEELS"
WHEEL_FILES=()
for d in "${WHEEL_DIRS[@]}"; do
  if compgen -G "$d/*.whl" > /dev/null; then
    WHEEL_FILES+=("$d"/*.whl)
  elif [ "$WHEELS" != .whl-dev ]; then  # a folder named on purpose: missing wheels would drop a peer silently
    echo "WHEELS: no wheels in $d" >&2; exit 2
  fi
done
if [ "${#WHEEL_FILES[@]}" -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "${WHEEL_FILES[@]}" \
    || { echo "wheel install failed" >&2; exit 1; }
  export PYTHONPATH=$PWD:/tmp/site
else
  export PYTHONPATH=$PWD
fi
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee "$OUT_DIR/card.txt" || true
SUMMARY="$OUT_DIR/.summary"  # a file: steps may run in the background (campaign seeds)
: > "$SUMMARY"
step() {  # step NAME COMMAND...: run, log, remember status and seconds
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  local rc=${PIPESTATUS[0]}
  printf '%-22s rc=%-3s %5ss\n' "$name" "$rc" "$((SECONDS - t0))" >> "$SUMMARY"
}
for part in "$@"; do
  case $part in
    verifier)
      step cheats env SOCRATIC_GPU_REPORTS=/tmp/cheat-reports python3 -m pytest -q -m gpu tests/gpu/test_cheats_gpu.py
      step cheat-table python3 tests/gpu/cheat_table.py --reports /tmp/cheat-reports --overhead --json "$OUT_DIR/overhead.json"
      step retime python3 tests/gpu/retime.py kernels/attention/gallery/fa2-mma-a.cu --json "$OUT_DIR/fa2-mma-a.retime.json"
      ;;
    gallery)
      step gallery python3 -m harness eval kernels/attention/gallery/wgmma-ws-a.cu \
        --json "$OUT_DIR/wgmma-ws-a.json" --timeout 30
      ;;
    tests)
      # shellcheck disable=SC2086
      step gpu-tests python3 -m pytest -q -m gpu ${TESTS:-tests/gpu} -p no:cacheprovider
      ;;
    cluster)
      step cluster python3 scripts/cluster_gpu_proof.py kernels/attention/gallery/fa2-mma-a.cu --gpus "${GPUS:-0,0}" \
        --json "$OUT_DIR/cluster_proof.json"
      ;;
    campaigns)
      # Issue 15's experiment: every arm on the same budget of evaluations over five scenarios (one
      # per category), then the table over the seeds in OUTDIR (docs/campaigns.md). Where a
      # seed would not fit one device call: SEEDS=0, then 1, then 2, one call each.
      FIVE="prefill-d128-s4096-b4-h16-full gqa-llama3-70b-tp8-s8192-b1-causal chunk-llama3-70b-tp8-q2048-k32768
            decode-llama3-8b-tp1-q4-b128-k1024 ragged-d256-q2049-k4097-causal"
      # One seed per GPU at once (CUDA_VISIBLE_DEVICES picks it), in rounds of as many GPUs as
      # the machine has: seeds are independent experiments.
      # The GPUs this call may use: CUDA_VISIBLE_DEVICES where it is set, else every one listed.
      if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        IFS=, read -r -a DEVS <<< "$CUDA_VISIBLE_DEVICES"
      else
        DEVS=()
        listed=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
        for ((d = 0; d < listed; d++)); do DEVS+=("$d"); done
      fi
      [ "${#DEVS[@]}" -ge 1 ] || DEVS=(0)
      NGPU=${#DEVS[@]}
      read -r -a SEED_LIST <<< "${SEEDS:-0 1 2}"
      for ((i = 0; i < ${#SEED_LIST[@]}; i += NGPU)); do
        for ((g = 0; g < NGPU && i + g < ${#SEED_LIST[@]}; g++)); do
          seed=${SEED_LIST[i + g]}
          # shellcheck disable=SC2086
          CUDA_VISIBLE_DEVICES=${DEVS[g]} step "campaigns-s$seed" python3 scripts/campaign_experiment.py \
            --out "$OUT_DIR/campaigns/s$seed" --seeds "$seed" --evaluations "${EVALUATIONS:-12}" \
            --deadline-s "${DEADLINE_S:-480}" --arms ${ARMS:-autonomous bank board evolution} \
            --scenarios $FIVE > /dev/null &
        done
        wait
      done
      [ "${#SEED_LIST[@]}" -gt 0 ] && tail -n 4 "$OUT_DIR"/campaigns-s*.log
      step campaigns-table python3 scripts/campaign_experiment.py --table "$OUT_DIR"/campaigns/s*
      ;;
    judge182)
      mkdir -p data
      step judge182-source python3 -m app trace kernel examples/agent-v2/all182-autonomous.jsonl.xz -o data/all182-39.cu
      step judge182 python3 scripts/agent_v2_proof.py --out "$OUT_DIR/judge182" --final --filter all \
        --also all-182-39=data/all182-39.cu --also gallery=kernels/attention/gallery/wgmma-tma-n.cu
      ;;
    all182)
      seed=${SEED:-2}
      step "all182-s$seed" python3 scripts/agent_v2_proof.py --out "data/all182-s$seed" --traces "$OUT_DIR/traces" \
        --arms all-182 --seed "$seed" --deadline-s "${DEADLINE_S:-400}"
      cp "data/all182-s$seed/summary.json" "$OUT_DIR/summary-all182-s$seed.json"
      cp "data/all182-s$seed/all-182/leader.cu" "$OUT_DIR/leader-all182-s$seed.cu"
      ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
echo
echo "part                   status  time"
cat "$SUMMARY"
