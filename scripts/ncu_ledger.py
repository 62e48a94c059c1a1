"""Where a kernel's warps wait, from Nsight Compute's source page (issue 18's profiles).

Reads the CSV of `ncu -i REPORT --page source --csv --print-source sass` (a report collected with
`--section SourceCounters`, which samples each warp's state per SASS instruction) and prints:
- the totals: instructions executed, samples, and the stall reasons' shares;
- the code grouped by how often each instruction ran in the launch (a loop body runs its
  iterations' count, a per-tile prologue the tiles' count, the producer its own): instructions,
  share of samples, share of executed instructions;
- the runs of consecutive instructions with one execution count that hold at least --min-share
  percent of the samples, with their main stalls and opcodes;
- the --top instructions by samples.

    python3 scripts/ncu_ledger.py SOURCE.csv [--top 20] [--min-share 0.5]

Stop 27 read two such profiles side by side (this kernel and FA3 on d128 s512 full) and found the
per-wgmma descriptor packing and the epilogue's store drain this way.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


@dataclass
class Instruction:
    index: int
    source: str
    samples: int
    executed: int
    stalls: Counter[str] = field(default_factory=Counter)

    @property
    def opcode(self) -> str:
        words = [w for w in self.source.split() if not w.startswith("@")]
        return words[0].split(".")[0] if words else ""


def read_source_page(lines: Sequence[str]) -> list[Instruction]:
    """The instructions of the first kernel on the page (the header row is the one that starts
    with "Address"; a stall column is `stall_<reason>` without the "(Not Issued)" variants)."""
    rows = list(csv.reader(lines))
    try:
        start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    except StopIteration:
        raise ValueError("no 'Address' header row: not an ncu --page source --csv export") from None
    header = rows[start]
    for column in ("Source", SAMPLES, EXECUTED):
        if column not in header:
            raise ValueError(f"the source page has no {column!r} column (collect SourceCounters)")
    stall_cols = [(i, h[len("stall_"):]) for i, h in enumerate(header)
                  if h.startswith("stall_") and "Not Issued" not in h]
    col = {h: i for i, h in enumerate(header)}
    out: list[Instruction] = []
    for r in rows[start + 1:]:
        if len(r) != len(header):
            break  # the next kernel's block, or the end
        stalls = Counter({name: int(r[i] or 0) for i, name in stall_cols if r[i] not in ("", "0")})
        out.append(Instruction(len(out), r[col["Source"]].strip(), int(r[col[SAMPLES]] or 0),
                               int(r[col[EXECUTED]] or 0), stalls))
    return out


def ledger(instrs: list[Instruction], top: int = 20, min_share: float = 0.5) -> str:
    samples = sum(i.samples for i in instrs) or 1
    executed = sum(i.executed for i in instrs) or 1
    stalls: Counter[str] = Counter()
    for i in instrs:
        stalls.update(i.stalls)
    lines = [f"instructions executed {executed}, samples {samples}",
             "stalls: " + "  ".join(f"{k} {v * 100 / samples:.1f}%" for k, v in stalls.most_common(8)),
             "", "by execution count (per launch):"]
    groups: dict[int, list[Instruction]] = {}
    for i in instrs:
        groups.setdefault(i.executed, []).append(i)
    for count, members in sorted(groups.items(), key=lambda g: -sum(i.samples for i in g[1]))[:10]:
        s = sum(i.samples for i in members)
        lines.append(f"  executed {count:>9}: {len(members):5d} instructions, {s * 100 / samples:5.1f}% of samples, "
                     f"{count * len(members) * 100 / executed:5.1f}% of executed")
    lines += ["", f"runs of one execution count with at least {min_share}% of the samples:"]
    run: list[Instruction] = []
    for i in [*instrs, None]:
        if i is not None and run and i.executed == run[0].executed:
            run.append(i)
            continue
        if run:
            s = sum(x.samples for x in run)
            if s * 100 / samples >= min_share:
                st: Counter[str] = Counter()
                for x in run:
                    st.update(x.stalls)
                ops = Counter(x.opcode for x in run)
                lines.append(f"  [{run[0].index:5d}-{run[-1].index:5d}] executed {run[0].executed:>8} "
                             f"n={len(run):4d} {s * 100 / samples:5.1f}%  "
                             + " ".join(f"{k}={v}" for k, v in st.most_common(3)) + "  | "
                             + " ".join(f"{k}x{v}" for k, v in ops.most_common(5)))
        run = [i] if i is not None else []
    lines += ["", f"top {top} instructions by samples:"]
    for i in sorted(instrs, key=lambda x: -x.samples)[:top]:
        main = " ".join(f"{k}={v}" for k, v in i.stalls.most_common(2))
        lines.append(f"  {i.index:5d} {i.samples * 100 / samples:5.1f}% executed {i.executed:>8}  "
                     f"{i.source[:64]:<64} {main}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--min-share", type=float, default=0.5)
    args = p.parse_args(argv)
    try:
        with open(args.csv, newline="") as fh:
            instrs = read_source_page(fh.read().splitlines())
    except (OSError, ValueError) as exc:
        print(f"ncu_ledger: {exc}", file=sys.stderr)
        return 2
    print(ledger(instrs, args.top, args.min_share))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
