"""Time per call and the SM clock it ran at, for kernels (and FA3) on one scenario, side by side.

    python3 scripts/clock_pair_gpu.py SECONDS SCENARIO KERNEL.cu|fa3 [KERNEL.cu|fa3 ...]

Each arm calls its kernel back to back for SECONDS (the device stays busy: chunks of calls, one
synchronization per chunk), in two rounds, the arms in reverse order in the second. Beside it,
`nvidia-smi -lms 50` samples the SM clock and the board power. Per arm and round it prints the
milliseconds per call (CUDA events over the window's last 80%), the mean clock and power of the
samples in that part, and their product, the cycles per call: two kernels whose cycles per call
agree but whose times differ are separated by their clocks (power), not by their code.
Issue 18 asked why the Hopper layer's long d128 loop takes ~9.5% more time per key block than
FA3's with no more instructions (stop 29); this tells the clock's share of it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu"


def _samples(path: Path) -> list[tuple[float, float, float, float]]:
    """(epoch seconds, SM MHz, watts, deg C) per line nvidia-smi wrote."""
    out = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(parts[1]), float(parts[2]), float(parts[3])))
        except ValueError:
            continue
    return out


def _window(call, seconds: float) -> tuple[float, float, float]:
    """Calls `call` back to back for `seconds`: a fifth to warm up, then the measured part (at
    least one chunk); (ms per call of that part, its start and end in host epoch seconds)."""
    import torch

    warm_until = time.time() + 0.2 * seconds
    while time.time() < warm_until:
        for _ in range(8):
            call()
        torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start = time.time()
    begin.record()
    n = 0
    while n == 0 or time.time() < start + 0.8 * seconds:
        for _ in range(8):
            call()
        n += 8
        torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / n, start, time.time()


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        seconds = float(argv[0])
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        print(f"SECONDS must be a positive number of seconds, not {argv[0]!r}", file=sys.stderr)
        return 2
    scenario, arms = argv[1], argv[2:]
    missing = [a for a in arms if a != "fa3" and not Path(a).is_file()]
    if missing:
        print(f"no kernel file {missing[0]!r} (an arm is KERNEL.cu or fa3)", file=sys.stderr)
        return 2
    from ncu_drive import scenario_call

    try:
        calls = {a: scenario_call(a, scenario) for a in arms}
    except (ValueError, RuntimeError) as exc:  # an unknown scenario; FA3 not loadable here
        print(exc, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "clocks.csv"
        try:
            smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                    "-lms", "50", "-f", str(log)])
        except FileNotFoundError:
            print("nvidia-smi is not on PATH: there is no clock to sample", file=sys.stderr)
            return 2
        try:
            time.sleep(1.0)
            windows = []
            for r, order in enumerate((arms, arms[::-1]), 1):
                for a in order:
                    windows.append((r, a, *_window(calls[a], seconds)))
                    time.sleep(1.0)  # the board cools a little between arms, the same for each
        finally:
            smi.terminate()
            smi.wait()
        samples = _samples(log)
    print(f"{scenario}: {len(samples)} clock samples")
    print(f"{'arm':<44} round  ms/call   MHz     W  Mcycles/call")
    for r, a, ms, start, end in windows:
        inside = [s for s in samples if start <= s[0] <= end]
        if not inside:
            print(f"{Path(a).name:<44} {r:>5} {ms:8.4f}  (no clock samples in the window)")
            continue
        mhz = sum(s[1] for s in inside) / len(inside)
        watts = sum(s[2] for s in inside) / len(inside)
        print(f"{Path(a).name:<44} {r:>5} {ms:8.4f} {mhz:6.0f} {watts:5.0f} {ms * mhz / 1e3:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
