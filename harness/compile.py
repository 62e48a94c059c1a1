"""Compiling a single-file kernel with nvcc into a shared library, cached by a hash of the
source, the contract header, the flags and the toolkit's version."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from harness.caches import cache_root
from harness.report import CompileInfo

SHIM = Path(__file__).parent / "shim" / "socratic_shim.cu"
KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"
DEFAULT_INCLUDE = KERNELS_DIR / "attention"
DEFAULT_ARCH = "sm_90a"
# -Xptxas -v: the resource report (registers, shared memory, spills) lands in every build log.
# -z defs: every name the library uses must be defined by what it links; libcuda is not linked,
# so a driver function other than the shim's cuTensorMapEncodeTiled fails the build.
# -fno-gnu-unique: g++ gives a static local of a function template (a kernel's "prepared once"
# flag) the binding STB_GNU_UNIQUE, which the dynamic loader makes one object per PROCESS even
# between RTLD_LOCAL libraries. Two kernels of one family in one worker (a contender re-timed
# against the leader) then shared that flag, and the second never set up its own kernel.
# unique_symbols() refuses a library that still has such a symbol (written by hand in asm).
# --split-compile=0: nvcc runs cicc's and ptxas's work on the file's functions in as many threads
# as the machine has CPUs (a family kernel holds ~17 kernels; cicc and ptxas were ~8 of its ~11 s
# in one thread). nvcc documents "minimal (if any) impact on performance"; on the gallery leader
# the attention kernels' SASS is the same instruction for instruction (docs/lab/2026-12-02-harness-compile-split.md).
COMPILE_FLAGS = (
    "-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-Xcompiler", "-fno-gnu-unique",
    "-lineinfo", "-Xptxas", "-v", "--split-compile=0",
)
LINK_FLAGS = ("-shared", "-Xlinker", "-z", "-Xlinker", "defs")
COMPILE_TIMEOUT_S = 300


class CompileError(RuntimeError):
    """nvcc refused the kernel; `log` holds its messages."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


def cache_dir() -> Path:
    return cache_root() / "kernels"


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for guess in ("/usr/local/cuda/bin/nvcc",):
        if os.path.exists(guess):
            return guess
    return None


@lru_cache(maxsize=4)
def toolkit_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def gencode_flags(arch: str) -> list[str]:
    """`sm_90a` -> -gencode=arch=compute_90a,code=sm_90a (the form that keeps wgmma legal)."""
    if not arch.startswith("sm_"):
        raise ValueError(f"arch must look like sm_90a, got {arch!r}")
    num = arch[3:]
    return [f"-gencode=arch=compute_{num},code=sm_{num}"]


def arch_for_capability(major: int, minor: int) -> str:
    """The target follows the GPU; Hopper gets the arch-specific `a` variant for wgmma."""
    return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"


@dataclass(frozen=True)
class CompiledKernel:
    library: Path
    info: CompileInfo


def compile_kernel(
    source: Path | str,
    *,
    arch: str = DEFAULT_ARCH,
    include_dir: Path = DEFAULT_INCLUDE,
    extra_flags: tuple[str, ...] = (),
    use_cache: bool = True,
    signed: bool = True,
) -> CompiledKernel:
    """Build `source` into a shared library (or return the cached one).

    `signed` (processes that never load a candidate: the CLI, the server, the executor): each
    library built is signed beside it (`kernel.so.sig`, harness/trusted_cache.py), and a cached one
    whose signature or digest does not match (rewritten since it was built) is built again
    (issue 47). An evaluation worker builds the harness's own kernels with signed=False: it never
    holds the key.

    Two translation units, compiled at once: the kernel, and the harness shim (built once per
    shim, flags and toolkit, then kept beside the kernels); then one link into the library.
    Raises CompileError with nvcc's output when the kernel does not build.
    """
    source = Path(source)
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc was not found on PATH", "nvcc not found")
    text = source.read_bytes()
    compile_flags = [*COMPILE_FLAGS, *gencode_flags(arch), *extra_flags, f"-I{include_dir}"]
    link_flags = [*LINK_FLAGS, *gencode_flags(arch)]
    key = hashlib.sha256()
    for part in (
        text,
        SHIM.read_bytes(),
        *(p.read_bytes() for p in sorted(include_dir.glob("*.h"))),
        " ".join([*compile_flags[:-1], *link_flags]).encode(),
        toolkit_version(nvcc).encode(),
    ):
        key.update(hashlib.sha256(part).digest())
    digest = key.hexdigest()
    out_dir = cache_dir() / digest[:32]
    library = out_dir / "kernel.so"
    log_file = out_dir / "nvcc.log"
    source_sha = hashlib.sha256(text).hexdigest()
    command = " ".join([nvcc, *compile_flags, "-c", "kernel.cu", "-o", "kernel.o"]) + " && " + " ".join(
        [nvcc, *link_flags, "-o", str(library), "kernel.o", "shim.o"])
    if use_cache and library.exists() and signed and not library_signed(library):
        shutil.rmtree(out_dir, ignore_errors=True)  # rewritten since it was built: built again
    if use_cache and library.exists():
        return CompiledKernel(
            library,
            CompileInfo(
                ok=True, cached=True, log=log_file.read_text() if log_file.exists() else "",
                command=command, library=str(library), source_sha256=source_sha,
            ),
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix="build-") as tmp:
        tmp_dir = Path(tmp)
        (tmp_dir / "kernel.cu").write_bytes(text)
        shim = _shim_object(nvcc, compile_flags, include_dir, cache_root() / "shim", signed)
        kernel = _run_nvcc([nvcc, *compile_flags, "-c", str(tmp_dir / "kernel.cu"), "-o",
                            str(tmp_dir / "kernel.o")], tmp_dir)
        if kernel.returncode != 0:
            raise CompileError(f"nvcc failed with exit code {kernel.returncode}",
                               kernel.output.replace(str(tmp_dir) + "/", ""))
        linked = _run_nvcc([nvcc, *link_flags, "-o", str(tmp_dir / "kernel.so"), str(tmp_dir / "kernel.o"),
                            str(shim.result())], tmp_dir)
        log = (kernel.output + linked.output).replace(str(tmp_dir) + "/", "")
        if linked.returncode != 0:
            raise CompileError(f"nvcc failed to link the library with exit code {linked.returncode}", log)
        shared = unique_symbols(tmp_dir / "kernel.so")
        if shared:
            raise CompileError(
                "the library defines process-wide (STB_GNU_UNIQUE) symbols, which another kernel "
                f"loaded in the same process would share: {', '.join(shared[:5])}",
                log + "\n[refused by the harness: STB_GNU_UNIQUE symbols " + ", ".join(shared) + "]\n",
            )
        (tmp_dir / "kernel.o").unlink()
        (tmp_dir / "nvcc.log").write_text(log)
        if signed:  # signed inside the build folder: the library and its signature appear together
            sign_library(tmp_dir / "kernel.so")
        try:
            os.rename(tmp_dir, out_dir)
            os.mkdir(tmp_dir)  # so that TemporaryDirectory's cleanup finds its folder
        except OSError:
            # Another process finished the same build first; its library is identical.
            pass
    return CompiledKernel(
        library,
        CompileInfo(
            ok=True, cached=False, seconds=time.monotonic() - start, log=log,
            command=command, library=str(library), source_sha256=source_sha,
        ),
    )


def _signature(library: Path) -> Path:
    return library.with_name(library.name + ".sig")


def sign_library(library: Path) -> None:
    from harness.signed_entries import write_signed

    write_signed(_signature(library), {"sha256": hashlib.sha256(library.read_bytes()).hexdigest()})


def library_signed(library: Path) -> bool:
    """Whether the library still has the digest signed when it was built."""
    from harness.signed_entries import Rejected, read_signed

    try:
        entry = read_signed(_signature(library))
    except Rejected:
        return False
    return entry is not None and entry.get("sha256") == hashlib.sha256(library.read_bytes()).hexdigest()


@dataclass(frozen=True)
class _NvccRun:
    returncode: int
    output: str


def _run_nvcc(cmd: list[str], cwd: Path) -> _NvccRun:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        raise CompileError(
            f"nvcc ran past {COMPILE_TIMEOUT_S} s", f"nvcc timed out after {exc.timeout} s"
        ) from exc
    return _NvccRun(proc.returncode, proc.stdout + proc.stderr)


_SHIM_BUILDS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="socratic-shim")
_SHIM_LOCK = threading.Lock()
_SHIM_PENDING: dict[Path, Future[Path]] = {}


def _shim_object(nvcc: str, compile_flags: list[str], include_dir: Path, root: Path,
                 signed: bool = True) -> Future[Path]:
    """The shim's object file for these flags, built once (in a thread, beside the kernel's
    compile) into `root`/<hash>/shim.o and kept there. The shim is the harness's own code: a
    failure to build it is the harness's error, not the candidate's. Linked into every library,
    it is signed like them (`signed`: shim.o.sig beside it), and one whose digest no longer
    matches its signature (an object rewritten since it was built: a worker may open existing
    files read-write on the GPU) is built again before any library links it (issue 47)."""
    key = hashlib.sha256()
    for part in (SHIM.read_bytes(), *(p.read_bytes() for p in sorted(include_dir.glob("*.h"))),
                 " ".join(compile_flags).encode(), toolkit_version(nvcc).encode()):
        key.update(hashlib.sha256(part).digest())
    folder = root / key.hexdigest()[:32]

    def build() -> Path:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix="build-") as tmp:
            tmp_dir = Path(tmp)
            run = _run_nvcc([nvcc, *compile_flags, "-c", str(SHIM), "-o", str(tmp_dir / "shim.o")], tmp_dir)
            if run.returncode != 0:
                raise CompileError(f"the harness shim failed to build (nvcc exit code {run.returncode})",
                                   run.output)
            if signed:  # inside the build folder: the object and its signature appear together
                sign_library(tmp_dir / "shim.o")
            try:
                os.rename(tmp_dir, folder)
                os.mkdir(tmp_dir)  # so that TemporaryDirectory's cleanup finds its folder
            except OSError:
                pass  # built by another process at the same time: the same object
        return folder / "shim.o"

    with _SHIM_LOCK:
        pending = _SHIM_PENDING.get(folder)
        if pending is not None and not pending.done():
            return pending  # being built for another kernel now
        kept = folder / "shim.o"
        if kept.exists() and signed and not library_signed(kept):
            shutil.rmtree(folder, ignore_errors=True)  # rewritten since it was built: built again
        if kept.exists():
            built: Future[Path] = Future()
            built.set_result(kept)
            return built
        _SHIM_PENDING[folder] = _SHIM_BUILDS.submit(build)
        return _SHIM_PENDING[folder]


STB_GNU_UNIQUE = 10
SHT_DYNSYM = 11


def unique_symbols(library: Path) -> list[str]:
    """The names in `library`'s dynamic symbol table bound STB_GNU_UNIQUE: the loader keeps one
    object per name for the whole process, so they are a channel between libraries that
    RTLD_LOCAL does not close. Reads the ELF64 little-endian file itself (no binutils needed)."""
    data = library.read_bytes()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise CompileError("the built library is not a 64-bit little-endian ELF file", "")
    try:
        return _unique_names(data)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise CompileError(f"the built library's symbol table cannot be read: {exc}", "") from exc


def _unique_names(data: bytes) -> list[str]:
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    if not any(section[1] == SHT_DYNSYM for section in sections):
        # A shared library exports the ABI, so it has one; none found (or a section count kept
        # elsewhere, e_shnum 0) means this reader does not see what the loader will.
        raise ValueError("no dynamic symbol table in the section headers")
    names: list[str] = []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != SHT_DYNSYM:
            continue
        if entsize < 24:
            raise ValueError(f"a dynamic symbol entry of {entsize} bytes")
        strtab_offset = sections[link][4]
        for at in range(offset, offset + size, entsize):
            st_name, st_info = struct.unpack_from("<IB", data, at)
            if st_info >> 4 == STB_GNU_UNIQUE:
                end = data.index(b"\0", strtab_offset + st_name)
                names.append(data[strtab_offset + st_name:end].decode(errors="replace"))
    return names
