"""How long the harness's own compile takes (not a test): each checkout builds the same kernels
with its own `harness.compile.compile_kernel` into an empty cache (a new process each time, the
kernel's source given a new comment so that nothing is shared), the checkouts alternating, for a
few rounds. Prints each build's seconds and each checkout's median.

    python3 scripts/compile_times.py [--rounds 3] [--before DIR] KERNEL.cu [KERNEL.cu ...]

Without --before, only this checkout. On the GPU machine this is the compile an agent's every new
candidate costs (docs/harness.md, "the compile in two units").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
BUILD = """
import sys, time, pathlib
from harness.compile import CompileError, compile_kernel
for path in sys.argv[1:]:
    t = time.monotonic()
    try:
        info = compile_kernel(pathlib.Path(path)).info
    except CompileError as err:
        sys.exit(f"{path}: {err}\\n{err.log}")
    print(f"{time.monotonic() - t:.2f} {int(info.ok)} {int(info.cached)}")
"""


def build(checkout: Path, kernels: list[Path], tag: str) -> list[float]:
    """Seconds of each kernel's build, in order, in one new process with an empty cache."""
    with tempfile.TemporaryDirectory(prefix="compile-times-") as tmp:
        copies = []
        for i, k in enumerate(kernels):
            copy = Path(tmp) / f"{i}-{k.name}"
            copy.write_text(k.read_text() + f"\n// {tag}: a new source\n")
            copies.append(str(copy))
        env = {**os.environ, "SOCRATIC_CACHE_DIR": str(Path(tmp) / "cache"), "PYTHONPATH": str(checkout)}
        proc = subprocess.run([sys.executable, "-c", BUILD, *copies], cwd=checkout, env=env,
                              capture_output=True, text=True)
    if proc.returncode != 0:  # a compile error, or a checkout without the harness
        raise SystemExit(f"{checkout}: the build failed:\n{proc.stderr.strip()[-3000:]}")
    rows = [line.split() for line in proc.stdout.split("\n") if line.strip()]
    if any(ok != "1" or cached != "0" for _, ok, cached in rows):
        raise SystemExit(f"{checkout}: a build failed or came from a cache: {rows}")
    return [float(s) for s, _, _ in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernels", nargs="+", type=Path)
    ap.add_argument("--before", type=Path, help="another checkout (e.g. main) to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    kernels = [k.resolve() for k in args.kernels]
    missing = [str(k) for k in kernels if not k.is_file()]
    if missing or (args.before is not None and not (args.before / "harness" / "compile.py").is_file()):
        ap.error(f"no such kernel: {', '.join(missing)}" if missing else f"{args.before} is not a checkout")
    arms = {"after": HERE} if args.before is None else {"before": args.before.resolve(), "after": HERE}
    seconds: dict[str, list[list[float]]] = {name: [] for name in arms}
    for r in range(1, args.rounds + 1):
        for name, checkout in arms.items():
            times = build(checkout, kernels, f"{name} round {r}")
            seconds[name].append(times)
            print(f"round {r} {name}: " + ", ".join(f"{k.name} {t:.2f} s" for k, t in zip(kernels, times, strict=True)),
                  flush=True)
    for name, runs in seconds.items():
        per_kernel = [statistics.median(run[i] for run in runs) for i in range(len(kernels))]
        print(f"{name} median: " + ", ".join(f"{k.name} {t:.2f} s" for k, t in zip(kernels, per_kernel, strict=True)))


if __name__ == "__main__":
    main()
