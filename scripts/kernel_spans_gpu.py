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
from collections import Counter
from pathlib import Path

CALLS = 15
FLUSH_BYTES = 256 << 20
Record = tuple[float, float, str]  # a kernel's start and end (us) and name, as the profiler gives them
Kernel = tuple[str, float, float]  # the same as name, start, end


def spans(which: str, scenario: str) -> list[list[Kernel]]:
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
    return group_calls([(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                        if e.device_type == torch.autograd.DeviceType.CUDA])[-CALLS:]



def is_flush(name: str) -> bool:
    """The L2 flush before each call: torch's fill of a byte tensor, which no call issues. A
    memset is not one: the kernel's host code may issue its own inside the call (the dynamic
    scheduler zeroes its tile counter before a causal launch), and it is part of the call's span."""
    return "FillFunctor<unsigned char>" in name


def group_calls(records: list[Record]) -> list[list[Kernel]]:
    """The kernels of each call, in time order: a flush starts a call, the kernels (memsets
    included) after it up to the next flush are the call's. A flush followed by nothing (records
    the profiler did not keep) is not a call; kernels before the first flush belong to no call."""
    out: list[list[Kernel]] = []
    for start, end, name in sorted(records):
        if is_flush(name):
            out.append([])
        elif out:
            out[-1].append((name, start, end))
    return [c for c in out if c]


def report(label: str, calls: list[list[Kernel]]) -> list[str]:
    """Lines: the call's span and each kernel's duration and the gap before it, medians over the
    calls that ran the most common sequence of kernels (the others are counted, not used)."""
    if not calls:
        return [f"  {label}: no call's kernels were recorded"]
    shapes = Counter(tuple(n for n, _, _ in c) for c in calls)
    names, _ = shapes.most_common(1)[0]
    same = [c for c in calls if tuple(n for n, _, _ in c) == names]
    left = f", {len(calls) - len(same)} calls with other kernels left out" if len(same) < len(calls) else ""
    span = statistics.median(c[-1][2] - c[0][1] for c in same)
    lines = [f"  {label}: span {span:.1f} us over {len(same)} calls{left}"]
    for i, name in enumerate(names):
        dur = statistics.median(c[i][2] - c[i][1] for c in same)
        gap = statistics.median(c[i][1] - c[i - 1][2] for c in same) if i else 0.0
        short = name if len(name) < 70 else name[:67] + "..."
        lines.append(f"    {dur:8.1f} us  (gap before {gap:5.1f})  {short}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    kernel, scenarios = argv[0], argv[1:]
    from harness.attention.suite import default_suite

    # every name checked before the GPU is touched: a typo in the third costs no device time
    unknown = sorted(set(scenarios) - {s.name for s in default_suite()})
    if unknown:
        print(f"no scenario named {', '.join(map(repr, unknown))} in the suite", file=sys.stderr)
        return 2
    if not Path(kernel).is_file():
        print(f"no kernel file {kernel!r}", file=sys.stderr)
        return 2
    for sc in scenarios:
        print(f"== {sc}")
        for which in (kernel, "fa3"):
            try:
                print("\n".join(report(Path(which).stem, spans(which, sc))))
            except RuntimeError as exc:  # a kernel that returns an error, or FA3 missing
                print(f"  {Path(which).stem}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
