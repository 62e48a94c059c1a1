"""What one call of a scenario runs on the device, kernel by kernel, for a kernel and FA3.

    python3 scripts/kernel_spans_gpu.py KERNEL.cu SCENARIO [SCENARIO ...]

Each implementation is called CALLS times on the scenario's shapes (scripts/ncu_drive.py's call:
contiguous Q/K/V/O, the default softmax scale; FA3 through the harness's peer, its own split-KV
choice), L2 flushed before each call as the harness's timing does, under the torch profiler
(CUPTI's kernel records, no replay and no clock locking). It prints, per implementation, the
median over the calls of each kernel's duration, of the gaps between them, and of the call's
span (first kernel's start to last kernel's end), in microseconds. Issue 18's question: where a
short call (decode at batch 1) spends the time FA3 does not.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

CALLS = 15
FLUSH_BYTES = 256 << 20


def spans(which: str, scenario: str) -> list[list[tuple[str, float, float]]]:
    """Per call: (kernel name, start us, end us) of each kernel of the call, in order."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ncu_drive import scenario_call

    call = scenario_call(which, scenario)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            flush.zero_()
            torch.cuda.synchronize()
            call()
            torch.cuda.synchronize()
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    # each call's kernels follow its flush (the only fill of bytes here): a flush starts a group
    out: list[list[tuple[str, float, float]]] = []
    for start, end, name in kernels:
        if "FillFunctor<unsigned char>" in name or "Memset" in name:
            out.append([])
        elif out:
            out[-1].append((name, start, end))
    # a call whose records the profiler's buffer lost leaves an empty group: not a call
    return [c for c in out if c][-CALLS:]


def report(label: str, calls: list[list[tuple[str, float, float]]]) -> None:
    if not calls:
        print(f"  {label}: no call's kernels were recorded")
        return
    shapes = {tuple(n for n, _, _ in c) for c in calls}
    if len(shapes) != 1:
        print(f"  {label}: calls differ in their kernels: {sorted(shapes)}")
    names = [n for n, _, _ in calls[0]]
    span = statistics.median(c[-1][2] - c[0][1] for c in calls)
    print(f"  {label}: span {span:.1f} us over {len(calls)} calls")
    for i, name in enumerate(names):
        dur = statistics.median(c[i][2] - c[i][1] for c in calls if len(c) == len(names))
        gap = (statistics.median(c[i][1] - c[i - 1][2] for c in calls if len(c) == len(names))
               if i else 0.0)
        short = name if len(name) < 70 else name[:67] + "..."
        print(f"    {dur:8.1f} us  (gap before {gap:5.1f})  {short}")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    kernel, scenarios = argv[0], argv[1:]
    for sc in scenarios:
        print(f"== {sc}")
        for which in (kernel, "fa3"):
            report(Path(which).stem, spans(which, sc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
