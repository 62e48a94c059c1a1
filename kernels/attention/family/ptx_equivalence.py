"""Check that re-rendered gallery kernels compile to the PTX of the files that were measured.

For each gallery kernel (`kernels/attention/gallery/X.knobs.json`), the file committed at a git
revision and today's rendering of its setting are both compiled with `nvcc -ptx` (the harness's
`-O3 -std=c++17`, sm_90a for the Hopper layer, sm_80 for mma.sync files) and compared after
dropping comments and debug lines and naming every mangled symbol alike (a kernel that gained a
template argument keeps its code under a new name). Same text in the same order: "identical";
the same functions in another order: "identical (reordered)".

    python3 -m kernels.attention.family.ptx_equivalence [--rev HEAD] [--jobs 2] [--record] [NAME ...]

--record writes the verdicts to gallery_ptx.json beside this file (with NAMEs, only their rows), with
the sha256 of each measured file (and of its strict build, which the gallery's harness reports
name) and of its rendering: the record that ties a report to the file that replaced the one it
measured. After a re-render is committed, check it again with --rev at the commit before it (a
file that renders as committed keeps its recorded lineage).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernels.attention.family.render import render
from kernels.attention.family.space import parse_knobs

ROOT = Path(__file__).resolve().parents[3]
GALLERY = ROOT / "kernels" / "attention" / "gallery"
INCLUDE = ROOT / "kernels" / "attention"
RECORD = Path(__file__).with_name("gallery_ptx.json")
STRICT = "#define SOCRATIC_SM90_TMA_STRICT 1\n"  # the harness's check build of a tma kernel
_SYMBOL = re.compile(r"\b_Z\w+")
_DEBUG = (".loc", ".file", "//", ".section .debug", "@@DWARF")


def nvcc() -> str:
    from harness.compile import nvcc_path

    found = nvcc_path()
    if found is None:
        raise SystemExit("nvcc not found")
    return found


def ptx(source: str, arch: str, workdir: Path, name: str) -> str:
    src = workdir / f"{name}.cu"
    out = workdir / f"{name}.ptx"
    src.write_text(source)
    num = arch[3:]
    cmd = [nvcc(), "-ptx", "-O3", "-std=c++17", f"-gencode=arch=compute_{num},code=sm_{num}",
           "-I", str(INCLUDE), str(src), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed on {name}:\n{done.stderr[-2000:]}")
    return out.read_text()


def normalized(text: str) -> list[str]:
    """PTX lines without comments and debug lines, every mangled name replaced by `SYM`."""
    lines = []
    for line in text.splitlines():
        line = line.split("//", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith(_DEBUG):
            continue
        lines.append(_SYMBOL.sub("SYM", line))
    return lines


def functions(lines: list[str]) -> list[str]:
    """Top-level PTX items (a directive at column 0 and the lines up to the next one)."""
    items: list[list[str]] = [[]]
    for line in lines:
        if line.startswith(".") and items[-1]:
            items.append([])
        items[-1].append(line)
    return ["\n".join(item) for item in items]


def compare(old: str, new: str) -> str:
    a, b = normalized(old), normalized(new)
    if a == b:
        return "identical"
    if sorted(functions(a)) == sorted(functions(b)):
        return "identical (reordered)"
    return "DIFFERENT"


def old_source(name: str, rev: str) -> str:
    path = f"kernels/attention/gallery/{name}.cu"
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def check(name: str, rev: str, workdir: Path) -> dict[str, str]:
    knobs = parse_knobs(str(GALLERY / f"{name}.knobs.json"))
    old, new = old_source(name, rev), render(knobs)
    row = {"measured": sha256(old), "measured_strict": sha256(STRICT + old), "rendered": sha256(new)}
    if old == new:
        return {"ptx": "byte-identical", **row}
    arch = "sm_90a" if knobs.mma == "wgmma" else "sm_80"
    return {"ptx": compare(ptx(old, arch, workdir, f"{name}.old"), ptx(new, arch, workdir, f"{name}.new")),
            "arch": arch, **row}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="gallery kernels (default: all)")
    parser.add_argument("--rev", default="HEAD", help="git revision of the measured files")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--record", action="store_true", help=f"write the verdicts to {RECORD.name}")
    args = parser.parse_args(argv)
    names = args.names or sorted(p.name.removesuffix(".knobs.json") for p in GALLERY.glob("*.knobs.json"))
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = dict(zip(names, pool.map(lambda n: check(n, args.rev, Path(tmp)), names), strict=True))
    for name, row in results.items():
        print(f"{name}: {row['ptx']}")
    if args.record:
        # a file that renders as committed keeps the lineage recorded against the file it replaced
        # (run with --rev at the commit before a re-render to check that one again)
        known = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        for name, row in results.items():
            old = known.get(name)
            if row["ptx"] == "byte-identical" and old and old["rendered"] == row["rendered"]:
                results[name] = old
        # kernels named on the command line: their rows replace theirs, the others' stay
        rows = {**known, **results} if args.names else results
        RECORD.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0 if all(row["ptx"] != "DIFFERENT" for row in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
