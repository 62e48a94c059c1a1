"""The worker's sandbox (issue 47): once its CUDA context, the harness's own kernels, the answer
key's connection and the baseline are ready, and before the candidate's library is loaded, the
worker installs a seccomp filter on every one of its threads that refuses what a kernel has no
business doing: opening files for writing, sockets, exec, process creation, ptrace, reaching into
other processes, signalling other processes, and changing the SIGSYS handler.

A refused call is not killed: the filter answers SECCOMP_RET_TRAP, the kernel skips the call and
raises SIGSYS in the thread that made it, and a small handler of the harness's own (built from
harness/sandbox_helper/sigsys.c by the parent, digest carried in the job) records the call, its
arguments and its path, then makes it return -EPERM. The worker reads that record after each
candidate call (a load of one integer, no system call) and fails the scenario with a reason that
names the attempt (`attempt_reason`). SECCOMP_RET_ERRNO alone would refuse the call too, but the
harness could not say what was tried; SECCOMP_RET_USER_NOTIF needs a supervisor that never takes
the GIL, i.e. native code anyway.

What stays allowed, because the harness needs it after the filter: reading files (the candidate's
library, Python modules), writing to descriptors opened before (the result pipe), local (AF_UNIX)
sockets (the answer key's connection passes tensors through multiprocessing's resource sharer,
which opens one per transfer; network families are refused, so no connection leaves the machine;
connect/bind/accept are left alone: only local sockets can exist to use them on), threads
(clone with CLONE_THREAD: CUDA, torch and CUPTI start threads; clone3 answers ENOSYS so that the C
library falls back to clone, whose flags the filter can read), memory mappings, ioctls. On the GPU
an existing file may be opened read-write (O_RDWR without O_CREAT/O_TRUNC/O_APPEND): the NVIDIA
driver opens its device nodes so after initialisation; what a kernel could rewrite that way is
signed or digest-checked before anyone trusts it (harness/trusted_cache.py, KernelSpec.sha256).
On the CPU backend O_RDWR is refused too."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.caches import cache_root

HELPER_SOURCE = Path(__file__).parent / "sandbox_helper" / "sigsys.c"

# seccomp(2) and BPF constants (linux/seccomp.h, linux/filter.h, linux/audit.h)
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_TRAP = 0x00030000
SECCOMP_RET_ERRNO = 0x00050000
ENOSYS = 38
BPF_LD_W_ABS = 0x20
BPF_JEQ = 0x15
BPF_JSET = 0x45
BPF_JGE = 0x35
BPF_RET = 0x06
OFF_NR, OFF_ARCH = 0, 4


def _arg(i: int) -> int:
    """Offset of the low 32 bits of argument i in struct seccomp_data (little-endian)."""
    return 16 + 8 * i


O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND, O_TMPFILE = 0o1, 0o2, 0o100, 0o1000, 0o2000, 0o20000000
CLONE_THREAD = 0x00010000
AF_UNIX = 1
SIGSYS = 31


@dataclass(frozen=True)
class Abi:
    audit_arch: int
    seccomp_nr: int
    # name -> number; None where the architecture has no such call
    calls: dict[str, int]


# Only the calls the filter names. x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: the
# generic table (include/uapi/asm-generic/unistd.h), which has no open, creat, fork, ... of its own.
_X86_64 = Abi(0xC000003E, 317, {
    "open": 2, "openat": 257, "openat2": 437, "creat": 85, "open_by_handle_at": 304,
    "socket": 41, "connect": 42, "bind": 49, "listen": 50, "accept": 43, "accept4": 288,
    "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kill": 62, "tgkill": 234,
    "tkill": 200, "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "rt_sigaction": 13, "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264,
    "renameat2": 316, "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266, "mkdir": 83,
    "mkdirat": 258, "rmdir": 84, "truncate": 76, "chmod": 90, "fchmodat": 268,
    "io_uring_setup": 425, "bpf": 321,
})
_AARCH64 = Abi(0xC00000B7, 277, {
    "openat": 56, "openat2": 437, "open_by_handle_at": 265, "socket": 198, "connect": 203,
    "bind": 200, "listen": 201, "accept": 202, "accept4": 242, "execve": 221, "execveat": 281,
    "clone": 220, "clone3": 435, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
    "kill": 129, "tgkill": 131, "tkill": 130, "pidfd_open": 434, "pidfd_send_signal": 424,
    "pidfd_getfd": 438, "rt_sigaction": 134, "unlinkat": 35, "renameat": 38, "renameat2": 276,
    "linkat": 37, "symlinkat": 36, "mkdirat": 34, "truncate": 45, "fchmodat": 53,
    "io_uring_setup": 425, "bpf": 280,
})
ABIS = {"x86_64": _X86_64, "aarch64": _AARCH64}

# What each refused call is, in the reason a person reads; and which argument is its path.
_WHAT = {
    "open": "open a file for writing", "openat": "open a file for writing",
    "openat2": "open a file (openat2)", "creat": "create a file", "open_by_handle_at": "open a file by handle",
    "socket": "open a network socket",
    "execve": "execute a program", "execveat": "execute a program", "fork": "start a process",
    "vfork": "start a process", "clone": "start a process", "ptrace": "trace a process (ptrace)",
    "process_vm_readv": "read another process's memory", "process_vm_writev": "write another process's memory",
    "kill": "signal another process", "tgkill": "signal another process", "tkill": "signal a thread by id",
    "pidfd_open": "open another process", "pidfd_send_signal": "signal another process",
    "pidfd_getfd": "take another process's file", "rt_sigaction": "replace the harness's SIGSYS handler",
    "unlink": "delete a file", "unlinkat": "delete a file", "rename": "rename a file",
    "renameat": "rename a file", "renameat2": "rename a file", "link": "link a file", "linkat": "link a file",
    "symlink": "make a symbolic link", "symlinkat": "make a symbolic link", "mkdir": "make a directory",
    "mkdirat": "make a directory", "rmdir": "remove a directory", "truncate": "truncate a file",
    "chmod": "change a file's mode", "fchmodat": "change a file's mode", "io_uring_setup": "set up io_uring",
    "bpf": "load a BPF program",
}
_PATH_ARG = {"open": 0, "openat": 1, "openat2": 1, "creat": 0, "execve": 0, "execveat": 1, "unlink": 0,
             "unlinkat": 1, "rename": 0, "renameat": 1, "renameat2": 1, "link": 0, "linkat": 1, "symlink": 1,
             "symlinkat": 2, "mkdir": 0, "mkdirat": 1, "rmdir": 0, "truncate": 0, "chmod": 0, "fchmodat": 1}
# Refused whatever their arguments (the rest are decided on an argument below).
_ALWAYS = ("openat2", "creat", "open_by_handle_at", "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv",
           "process_vm_writev", "tkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "unlink",
           "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "mkdir",
           "mkdirat", "rmdir", "truncate", "chmod", "fchmodat", "io_uring_setup", "bpf")


def current_abi() -> Abi | None:
    return ABIS.get(platform.machine())


class _Asm:
    """A tiny BPF assembler: instructions with symbolic jump targets, resolved to the relative
    8-bit offsets classic BPF wants."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.code.append((code, jt, jf, k & 0xFFFFFFFF))

    def assemble(self) -> list[tuple[int, int, int, int]]:
        return [(code, self._rel(i, jt), self._rel(i, jf), k) for i, (code, jt, jf, k) in enumerate(self.code)]

    def _rel(self, i: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - i - 1
        if not 0 <= offset < 256:
            raise ValueError(f"BPF jump to {target} out of range ({offset})")
        return offset


def build_filter(abi: Abi, pid: int, allow_rdwr: bool) -> list[tuple[int, int, int, int]]:
    """The filter's instructions: (code, jt, jf, k)."""
    a = _Asm()
    write_flags = O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_TMPFILE | (0 if allow_rdwr else O_RDWR)
    calls = abi.calls
    a.op(BPF_LD_W_ABS, OFF_ARCH)
    a.op(BPF_JEQ, abi.audit_arch, 0, "trap")  # another ABI (i386 int 0x80): refused
    a.op(BPF_LD_W_ABS, OFF_NR)
    a.op(BPF_JGE, 0x40000000, "trap", 0)  # x32 numbers on x86_64
    for name in _ALWAYS:
        if name in calls:
            a.op(BPF_JEQ, calls[name], "trap", 0)
    if "clone3" in calls:  # its flags sit in a struct the filter cannot read: the C library falls back
        a.op(BPF_JEQ, calls["clone3"], "enosys", 0)
    checks = [("open", 1, "open_flags"), ("openat", 2, "open_flags"), ("socket", 0, "unix_only"),
              ("clone", 0, "clone_flags"),
              ("kill", 0, "own_pid"), ("tgkill", 0, "own_pid"), ("rt_sigaction", 0, "sigsys")]
    for name, arg, target in checks:
        if name in calls:
            a.op(BPF_JEQ, calls[name], 0, f"after_{name}")
            a.op(BPF_LD_W_ABS, _arg(arg))
            a.op(BPF_JEQ, 0, target, target)  # unconditional
            a.label(f"after_{name}")
    a.op(BPF_RET, SECCOMP_RET_ALLOW)
    a.label("open_flags")
    a.op(BPF_JSET, write_flags, "trap", "allow")
    a.label("unix_only")
    a.op(BPF_JEQ, AF_UNIX, "allow", "trap")
    a.label("clone_flags")
    a.op(BPF_JSET, CLONE_THREAD, "allow", "trap")
    a.label("own_pid")
    a.op(BPF_JEQ, pid, "allow", "trap")
    a.label("sigsys")
    a.op(BPF_JEQ, SIGSYS, "trap", "allow")
    a.label("allow")
    a.op(BPF_RET, SECCOMP_RET_ALLOW)
    a.label("trap")
    a.op(BPF_RET, SECCOMP_RET_TRAP)
    a.label("enosys")
    a.op(BPF_RET, SECCOMP_RET_ERRNO | ENOSYS)
    return a.assemble()


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class _Attempt(ctypes.Structure):
    _fields_ = [("nr", ctypes.c_int), ("in_candidate", ctypes.c_int), ("args", ctypes.c_ulonglong * 6),
                ("path", ctypes.c_char * 256)]


MAX_ATTEMPTS = 64


@dataclass(frozen=True)
class Attempt:
    call: str
    in_candidate: bool
    path: str
    args: tuple[int, ...]


def attempt_reason(a: Attempt) -> str:
    """The reason a person reads: what the candidate tried, on what."""
    what = _WHAT.get(a.call, f"make the system call {a.call}")
    if a.call in ("kill", "tgkill"):
        return f"sandbox: the candidate tried to {what}: pid {ctypes.c_int(a.args[0] & 0xFFFFFFFF).value}"
    if a.call == "clone":
        return f"sandbox: the candidate tried to {what} (clone without CLONE_THREAD)"
    where = f": {a.path}" if a.path else ""
    return f"sandbox: the candidate tried to {what}{where} (refused by the harness's seccomp filter)"


# -- the helper: built by the parent, loaded by the worker ----------------------------------------


def helper_library() -> tuple[str, str] | None:
    """The SIGSYS helper built from sigsys.c (once per source and compiler, under the cache
    folder), with its sha256: (path, digest). Built by the executor's process, which never loads a
    candidate; the worker checks the digest before loading it. None where no C compiler exists."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    text = HELPER_SOURCE.read_bytes()
    key = hashlib.sha256(text + cc.encode() + platform.machine().encode()).hexdigest()[:24]
    folder = cache_root() / "sandbox" / key
    lib = folder / "sigsys.so"
    if not lib.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            out = Path(tmp) / "sigsys.so"
            run = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(HELPER_SOURCE)],
                                 capture_output=True, text=True, timeout=120)
            if run.returncode != 0:
                return None
            os.replace(out, lib)
    return str(lib), hashlib.sha256(lib.read_bytes()).hexdigest()


class Sandbox:
    """The installed filter and its record, as the worker uses it."""

    def __init__(self, helper: ctypes.CDLL, abi: Abi) -> None:
        self.lib = helper
        self.abi = abi
        self.names = {nr: name for name, nr in abi.calls.items()}
        self._count = ctypes.c_int.in_dll(helper, "socratic_sandbox_count")
        self._flag = ctypes.c_int.in_dll(helper, "socratic_sandbox_in_candidate")
        self._attempts = (_Attempt * MAX_ATTEMPTS).in_dll(helper, "socratic_sandbox_attempts")
        self.seen = 0

    @classmethod
    def install(cls, helper_path: str, helper_sha256: str, allow_rdwr: bool) -> Sandbox:
        """Arm the SIGSYS handler, then install the filter on every thread (TSYNC). Raises
        RuntimeError with the cause when it cannot: the evaluation then does not start."""
        abi = current_abi()
        if abi is None:
            raise RuntimeError(f"no seccomp filter for this architecture ({platform.machine()})")
        data = Path(helper_path).read_bytes()
        if hashlib.sha256(data).hexdigest() != helper_sha256:
            raise RuntimeError("the sandbox helper's digest does not match the one in the job")
        lib = ctypes.CDLL(helper_path)
        if lib.socratic_sandbox_arm() != 0:
            raise RuntimeError("could not install the SIGSYS handler")
        paths = (ctypes.c_byte * 1024).in_dll(lib, "socratic_sandbox_path_arg")
        for name, i in _PATH_ARG.items():
            if name in abi.calls:
                paths[abi.calls[name]] = i
        insns = build_filter(abi, os.getpid(), allow_rdwr)
        arr = (_SockFilter * len(insns))(*[_SockFilter(*x) for x in insns])
        prog = _SockFprog(len(insns), arr)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise RuntimeError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}")
        rc = libc.syscall(abi.seccomp_nr, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
                          ctypes.byref(prog))
        if rc != 0:
            raise RuntimeError(f"seccomp(SECCOMP_SET_MODE_FILTER) failed: rc {rc}, errno {ctypes.get_errno()}")
        return cls(lib, abi)

    def enter(self) -> None:
        """The candidate's code runs from here (a plain store: no system call)."""
        self._flag.value = 1

    def leave(self) -> str | None:
        """The candidate's call returned: the reason of its first refused attempt, if any. Two
        loads when nothing new was refused (the common case: ~1 us a call)."""
        self._flag.value = 0
        n = self._count.value
        if n != self.seen:
            self.seen = n
            self._first = self.reason()
        return self._first

    _first: str | None = None

    def reason(self) -> str | None:
        found = self.attempts(candidate_only=True)
        return attempt_reason(found[0]) if found else None

    def attempts(self, candidate_only: bool = False) -> list[Attempt]:
        n = min(self._count.value, MAX_ATTEMPTS)
        out = []
        for i in range(n):
            a = self._attempts[i]
            if candidate_only and not a.in_candidate:
                continue
            out.append(Attempt(self.names.get(a.nr, f"#{a.nr}"), bool(a.in_candidate),
                               a.path.decode(errors="replace"), tuple(a.args)))
        return out

    def describe(self) -> dict[str, object]:
        return {"installed": True, "arch": platform.machine(),
                "refused_outside_candidate": [f"{a.call} {a.path}".strip() for a in self.attempts()
                                              if not a.in_candidate][:8]}
