# Shared by issue 18's device scripts (wgmma_variants_gpu.sh, wgmma_l2_sections_gpu.sh); source it
# from the repository root. It sets up the environment (wheels carried in wheels/ go to
# /tmp/site) and defines:
#   render_strict DIR GALLERY NAME=CHANGES...  strict builds (#define SOCRATIC_SM90_TMA_STRICT 1:
#       a call no tensor map describes fails instead of falling back) of the gallery kernel's
#       setting with each NAME's knob changes (key=value,...; empty: the gallery setting itself,
#       checked to render the gallery file byte for byte) as DIR/NAME.cu
#   precompile_all DIR NAME...                  nvcc builds in parallel, into the harness cache
#   step NAME SECONDS ARGS...                   one `harness eval ARGS` into $OUT/NAME.json and .log
export PYTHONUNBUFFERED=1 SOCRATIC_CACHE_DIR=${SOCRATIC_CACHE_DIR:-/tmp/socratic-cache}
if ls wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site wheels/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site

render_strict() {
  local dir=$1 gallery=$2; shift 2
  mkdir -p "$dir"
  python3 - "$dir" "$gallery" "$@" <<'PY'
import sys
from pathlib import Path
from kernels.attention.family.render import render
from kernels.attention.family.space import parse_knobs
out, name, specs = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
gallery = Path("kernels/attention/gallery")
base = parse_knobs(str(gallery / f"{name}.knobs.json"))
assert render(base) == (gallery / f"{name}.cu").read_text(), f"{name}.cu does not render from its knobs"
for spec in specs:
    label, _, changes = spec.partition("=")
    k = parse_knobs(changes, base) if changes else base
    (out / f"{label}.cu").write_text("#define SOCRATIC_SM90_TMA_STRICT 1\n" + render(k.validate()))
    print(label, k.slug()[-44:])
PY
}

precompile_all() {
  local dir=$1 t0=$SECONDS n; shift
  for n in "$@"; do
    python3 -c "from pathlib import Path; from harness.evaluate import precompile; print('$n', precompile(Path('$dir/$n.cu')))" &
  done
  wait
  echo "compiled in $((SECONDS - t0)) s"
}

step() {
  local name=$1 limit=$2; shift 2
  local t=$SECONDS
  [ "$limit" -gt 10 ] || { echo "=== $name: skipped, $limit s left"; return; }
  echo "=== $name: $*"
  timeout "$limit" python3 -m harness eval "$@" --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $((SECONDS - t)) s"; tail -3 "$OUT/$name.log"
}
