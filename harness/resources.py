"""What a kernel engineer reads before any run (verifier rule 2): the compiler's resource report
per kernel (registers, static shared memory, stack frame, spills, from `ptxas -v`) and, where
cuobjdump exists, the instruction mix of the built library (HGMMA, HMMA, FFMA, ...)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.shared_memory import Compiler

# Opcodes worth counting, in the order a table shows them: matrix units first, then the
# CUDA-core math, memory traffic (LDL/STL are local-memory spills) and synchronization.
MIX_OPCODES = (
    "HGMMA", "QGMMA", "HMMA", "IMMA", "FFMA", "FMUL", "FADD", "MUFU",
    "LDG", "STG", "LDGSTS", "UTMALDG", "LDS", "STS", "LDSM", "LDL", "STL", "SHFL", "BAR",
)
SASS_TIMEOUT_S = 120


@dataclass
class KernelResources:
    """One __global__ function as ptxas built it. `shared_bytes` is its static shared memory;
    the dynamic shared memory, chosen at launch, is read from the source where it can be
    (harness/shared_memory.py): None when the source sets none for this kernel or its value is
    known only at run time (`dynamic_shared` then says where it is set)."""

    name: str
    arch: str = ""
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0
    constant_bytes: int = 0
    dynamic_shared_bytes: int | None = None  # at launch, else the opt-in's
    dynamic_shared_optin: int | None = None  # cudaFuncAttributeMaxDynamicSharedMemorySize
    dynamic_shared: str = ""  # where the source sets it, with each value

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


@dataclass
class ResourceReport:
    kernels: list[KernelResources] = field(default_factory=list)
    # kernel name -> opcode -> count; None when no disassembler was found.
    instruction_mix: dict[str, dict[str, int]] | None = None
    notes: list[str] = field(default_factory=list)
    arch: str = ""

    def warnings(self) -> list[str]:
        from harness.shared_memory import warnings as smem_warnings

        out = smem_warnings(self.kernels, self.arch)
        for k in self.kernels:
            if k.spills:
                out.append(
                    f"{k.name} spills to local memory ({k.spill_store_bytes} bytes stored, "
                    f"{k.spill_load_bytes} bytes loaded)"
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernels": [asdict(k) for k in self.kernels],
            "instruction_mix": self.instruction_mix,
            "notes": list(self.notes),
        }


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_BARRIERS_RE = re.compile(r"used (\d+) barriers")
_CMEM0_RE = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas(log: str) -> list[KernelResources]:
    """The entry functions of a `ptxas -v` log (nvcc -Xptxas -v), in the order compiled."""
    kernels: dict[str, KernelResources] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    entry: KernelResources | None = None
    props_for: str | None = None
    for line in log.splitlines():
        m = _ENTRY_RE.search(line)
        if m:
            entry = kernels.setdefault(m.group(1), KernelResources(m.group(1), m.group(2)))
            continue
        m = _PROPS_RE.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _FRAME_RE.search(line)
        if m and props_for is not None:
            frames[props_for] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            props_for = None
            continue
        m = _USED_RE.search(line)
        if m and entry is not None:
            entry.registers = int(m.group(1))
            if sm := _SMEM_RE.search(line):
                entry.shared_bytes = int(sm.group(1))
            if bm := _BARRIERS_RE.search(line):
                entry.barriers = int(bm.group(1))
            if cm := _CMEM0_RE.search(line):
                entry.constant_bytes = int(cm.group(1))
            entry = None
    for name, k in kernels.items():
        if name in frames:
            k.stack_bytes, k.spill_store_bytes, k.spill_load_bytes = frames[name]
    return list(kernels.values())


_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTR_RE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def parse_sass(text: str) -> dict[str, dict[str, int]]:
    """Per function, the count of each opcode in MIX_OPCODES plus `total` instructions."""
    mix: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        m = _FUNCTION_RE.match(line)
        if m:
            current = mix.setdefault(m.group(1), {"total": 0})
            continue
        if current is None:
            continue
        m = _INSTR_RE.search(line)
        if not m:
            continue
        op = m.group(1)
        current["total"] += 1
        if op in MIX_OPCODES:
            current[op] = current.get(op, 0) + 1
    return mix


def cuobjdump_path() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    guess = Path("/usr/local/cuda/bin/cuobjdump")
    return str(guess) if guess.exists() else None


def instruction_mix(library: Path) -> tuple[dict[str, dict[str, int]] | None, str]:
    """SASS opcode counts of a built library, or (None, why not)."""
    tool = cuobjdump_path()
    if tool is None:
        return None, "instruction mix: cuobjdump was not found on this machine"
    try:
        out = subprocess.run(
            [tool, "--dump-sass", str(library)], capture_output=True, text=True,
            timeout=SASS_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"instruction mix: cuobjdump failed ({exc})"
    if out.returncode != 0:
        return None, f"instruction mix: cuobjdump failed: {out.stderr.strip()[:200]}"
    return parse_sass(out.stdout), ""


def demangle(names: list[str]) -> dict[str, str]:
    """Readable names through c++filt where it exists (mangled names otherwise)."""
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    try:
        out = subprocess.run(
            [tool], input="\n".join(names), capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return {n: n for n in names}
    readable = out.stdout.splitlines()
    if out.returncode != 0 or len(readable) != len(names):
        return {n: n for n in names}
    return {n: short_name(r) for n, r in zip(names, readable, strict=True)}


def short_name(demangled: str) -> str:
    """`void (anonymous namespace)::attn<64, 16>(Args)` -> `attn<64, 16>`."""
    name = demangled.strip()
    name = re.sub(r"^void\s+", "", name)
    name = name.replace("(anonymous namespace)::", "")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name or demangled


def resource_report(compile_log: str, library: Path | None, source: str | None = None, arch: str = "",
                    front_end: Compiler | None = None) -> ResourceReport:
    """The ptxas report from a compile log and, when a library and cuobjdump exist, the mix.
    With the kernel's `source`, each kernel's dynamic shared memory as the source sets it,
    evaluated by `front_end` (harness/shared_memory.py: nvcc_front_end) where it is an expression."""
    report = ResourceReport(kernels=parse_ptxas(compile_log), arch=arch)
    if not report.kernels:
        report.notes.append(
            "resources: ptxas reported no kernel (no __global__ function was compiled)"
            if "ptxas info" in compile_log
            else "resources: the compile log has no ptxas report (-Xptxas -v)"
        )
    mix: dict[str, dict[str, int]] | None = None
    if library is not None:
        mix, why = instruction_mix(library)
        if why:
            report.notes.append(why)
    readable = demangle(sorted({k.name for k in report.kernels} | set(mix or {})))
    for k in report.kernels:
        k.name = readable.get(k.name, k.name)
    if mix is not None:
        report.instruction_mix = {readable.get(n, n): counts for n, counts in mix.items()}
    if source is not None:
        from harness.shared_memory import attach

        report.notes.extend(attach(report.kernels, source, front_end))
    return report


def _dynamic(k: KernelResources) -> str:
    if k.dynamic_shared_bytes is not None:
        return str(k.dynamic_shared_bytes)
    return "run time" if k.dynamic_shared else "-"


def render_resources(report: ResourceReport, width: int = 60) -> str:
    """The resource report and the instruction mix as fixed-width tables."""
    lines = [f"{'kernel':<{width}} {'regs':>5} {'smem':>7} {'dyn smem':>9} {'stack':>6} {'spill st/ld':>12} "
             f"{'bar':>4}"]
    for k in report.kernels:
        name = k.name if len(k.name) <= width else k.name[: width - 3] + "..."
        lines.append(
            f"{name:<{width}} {k.registers:>5} {k.shared_bytes:>7} {_dynamic(k):>9} {k.stack_bytes:>6} "
            f"{f'{k.spill_store_bytes}/{k.spill_load_bytes}':>12} {k.barriers:>4}"
        )
    if any(k.dynamic_shared for k in report.kernels):
        lines.append("smem: static, from ptxas; dyn smem: dynamic, as the source sets it at launch (else its opt-in), "
                     "evaluated by nvcc's front end (\"run time\": known only when it runs; \"-\": the source sets "
                     "none). Where:")
        lines.extend(f"  {k.name}: {k.dynamic_shared}" for k in report.kernels if k.dynamic_shared)
    if report.instruction_mix:
        shown = [op for op in MIX_OPCODES if any(op in c for c in report.instruction_mix.values())]
        lines.append("")
        lines.append(f"{'instruction mix (SASS)':<{width}} " + " ".join(f"{op:>7}" for op in shown)
                     + f" {'total':>7}")
        for name, counts in report.instruction_mix.items():
            short = name if len(name) <= width else name[: width - 3] + "..."
            lines.append(f"{short:<{width}} " + " ".join(f"{counts.get(op, 0):>7}" for op in shown)
                         + f" {counts.get('total', 0):>7}")
    lines.extend(report.notes)
    lines.extend(f"warning: {w}" for w in report.warnings())
    return "\n".join(lines)
