"""The worker's sandbox (harness/sandbox.py, issue 47): after its CUDA context and before the
candidate is loaded, the evaluation process refuses writes to files, sockets, exec, process
creation, ptrace and signals to other processes. Each cheat of tests/cpu_cheats.py tries one of
them through the real worker: the scenario fails with a reason that names the attempt, and the
file it tried to write stays as it was."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from harness.executor import LocalExecutor
from harness.job import KernelSpec, WorkerJob
from harness.report import FAIL, PASS, ScenarioResult
from harness.sandbox import ABIS, SECCOMP_RET_ALLOW, SECCOMP_RET_TRAP, build_filter, helper_library
from harness.settings import EvalSettings
from tests.cpu_cheats import SANDBOX_TARGET_ENV
from tests.harness.support import FAST, SCENARIOS

pytestmark = pytest.mark.skipif(platform.machine() not in ABIS or helper_library() is None,
                                reason="no seccomp filter for this machine, or no C compiler")


def run(fn: str, module: str = "tests.cpu_cheats", **opts: object) -> list[ScenarioResult]:
    settings = EvalSettings(**{"device": "cpu", "peers": (), "timing": FAST, "trials": 1, **opts})  # type: ignore[arg-type]
    job = WorkerJob("attention-forward", KernelSpec(fn, "python", f"{module}:{fn}"),
                    KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"), SCENARIOS[:1], settings)
    return LocalExecutor().run(job).results


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "baseline-times.json"
    path.write_text("as the harness wrote it")
    monkeypatch.setenv(SANDBOX_TARGET_ENV, str(path))
    return path


def test_a_candidate_that_opens_a_file_for_writing_fails_naming_the_file(target: Path) -> None:
    (r,) = run("writes_a_file")
    assert r.status == FAIL
    assert f"the candidate tried to open a file for writing: {target}" in r.reason
    assert target.read_text() == "as the harness wrote it"


@pytest.mark.parametrize(("fn", "phrase"), [
    ("opens_a_socket", "the candidate tried to open a network socket"),
    ("executes_a_program", "the candidate tried to execute a program: /bin/true"),
    ("forks", "the candidate tried to start a process"),
    ("traces_its_parent", "the candidate tried to trace a process (ptrace)"),
    ("signals_its_parent", "the candidate tried to signal another process"),
])
def test_each_refused_operation_fails_the_scenario_with_its_reason(fn: str, phrase: str) -> None:
    (r,) = run(fn)
    assert r.status == FAIL, (r.status, r.reason)
    assert phrase in r.reason and r.reason.startswith("sandbox: ")


def test_threads_still_work_under_the_filter() -> None:
    (r,) = run("starts_a_thread")
    assert (r.status, r.reason) == (PASS, "")


def test_without_hardening_the_same_write_goes_through(target: Path) -> None:
    """The switch that the cost measurement uses: the sandbox is what refused it."""
    (r,) = run("writes_a_file", hardening=False)
    assert r.status == PASS
    assert target.read_text() == '{"median_ms": 1e9}'


def test_the_report_says_the_sandbox_was_installed() -> None:
    job = WorkerJob("attention-forward", KernelSpec("c", "python", "tests.cpu_kernels:correct"), None,
                    SCENARIOS[:1], EvalSettings(device="cpu", peers=(), timing=FAST, trials=1))
    out = LocalExecutor().run(job)
    assert out.device["sandbox"]["installed"] is True
    assert "sandbox_and_candidate" in out.device["setup_phases"]


def test_the_filter_traps_writes_and_processes_and_allows_reads_and_threads() -> None:
    """The BPF program itself, run by a tiny interpreter over seccomp_data records."""
    abi = ABIS["x86_64"]
    prog = build_filter(abi, pid=4242, allow_rdwr=False)

    def decide(nr: int, *args: int, arch: int = abi.audit_arch) -> int:
        data = {0: nr, 4: arch, **{16 + 8 * i: a for i, a in enumerate(args)}}
        acc, pc = 0, 0
        while True:
            code, jt, jf, k = prog[pc]
            if code == 0x20:
                acc = data.get(k, 0)
            elif code == 0x06:
                return k & 0xFFFF0000
            elif code == 0x15:
                pc += jt if acc == k else jf
            elif code == 0x45:
                pc += jt if acc & k else jf
            elif code == 0x35:
                pc += jt if acc >= k else jf
            pc += 1

    c = abi.calls
    assert decide(c["openat"], 0, 0, os.O_RDONLY) == SECCOMP_RET_ALLOW
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND):
        assert decide(c["openat"], 0, 0, flags) == SECCOMP_RET_TRAP, flags
    assert decide(c["open"], 0, os.O_WRONLY | os.O_CREAT) == SECCOMP_RET_TRAP
    assert decide(c["clone"], 0x3D0F00) == SECCOMP_RET_ALLOW  # the C library's thread flags
    assert decide(c["clone"], 17) == SECCOMP_RET_TRAP  # fork: SIGCHLD only
    assert decide(c["kill"], 4242) == SECCOMP_RET_ALLOW and decide(c["kill"], 1) == SECCOMP_RET_TRAP
    assert decide(c["rt_sigaction"], 31) == SECCOMP_RET_TRAP and decide(c["rt_sigaction"], 2) == SECCOMP_RET_ALLOW
    for name in ("execve", "fork", "vfork", "ptrace", "process_vm_writev", "unlink"):
        assert decide(c[name]) == SECCOMP_RET_TRAP, name
    assert decide(c["socket"], 2) == SECCOMP_RET_TRAP and decide(c["socket"], 10) == SECCOMP_RET_TRAP  # inet, inet6
    assert decide(c["socket"], 1) == SECCOMP_RET_ALLOW  # AF_UNIX: the answer key's transfers
    assert decide(0) == SECCOMP_RET_ALLOW  # read(2) is 0 on x86_64
    assert decide(c["openat"], arch=0x40000003) == SECCOMP_RET_TRAP  # i386 calls through int 0x80
    gpu = build_filter(abi, pid=1, allow_rdwr=True)
    prog[:] = gpu
    assert decide(c["openat"], 0, 0, os.O_RDWR) == SECCOMP_RET_ALLOW  # the driver's device nodes
    assert decide(c["openat"], 0, 0, os.O_RDWR | os.O_CREAT) == SECCOMP_RET_TRAP


def test_a_helper_whose_digest_differs_from_the_job_is_refused(tmp_path: Path) -> None:
    """The helper is built by the executor; the worker loads it only if its bytes match."""
    code = ("from harness.sandbox import Sandbox, helper_library\n"
            "p, d = helper_library()\n"
            "try:\n    Sandbox.install(p, '0' * 64, False)\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert "digest does not match" in out.stdout


def test_what_the_candidate_tries_while_it_is_loaded_is_its_own_and_stops_the_evaluation(target: Path) -> None:
    """The sandbox is in place before the candidate's code is loaded."""
    (r,) = run("kernel", module="tests.harness.import_time_writer")
    assert r.status == "error"
    assert f"while loading the candidate: sandbox: the candidate tried to open a file for writing: {target}" in r.reason
    assert target.read_text() == "as the harness wrote it"


LEAVE_PROBE = """
import atexit, os, sys
import torch, torch.multiprocessing
from harness.sandbox import Sandbox, helper_library
torch.multiprocessing.set_sharing_strategy("file_system")
held = [torch.zeros(16).share_memory_()]  # its last reference unlinks its file, as a CUDA IPC arena's counts do
atexit.register(held.clear)  # a normal exit frees what the worker held
path, digest = helper_library()
Sandbox.install(path, digest, False)
print(os.getpid(), flush=True)
if sys.argv[1] == "leave":
    from harness.executor import _leave
    _leave()
"""


@pytest.mark.parametrize("how", ["exit", "leave"])
def test_a_worker_leaves_without_the_destructor_that_aborts_under_the_sandbox(how: str) -> None:
    """Freeing shared memory under the sandbox unlinks its file, which seccomp refuses; torch
    throws from a destructor and the process aborts (seen once on the H100 as a worker ended).
    A worker that finished its job leaves without destructors (harness/executor.py: _leave);
    its executor removes the file."""
    from harness.executor import remove_shared_memory

    out = subprocess.run([sys.executable, "-c", LEAVE_PROBE, how], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    pid = int(out.stdout.split()[0])
    remove_shared_memory([pid])
    if how == "exit":
        assert out.returncode == -6, out.stderr[-2000:]  # SIGABRT
        assert "could not unlink the shared memory file /torch_" in out.stderr
    else:
        assert out.returncode == 0, out.stderr[-2000:]
        assert "could not unlink" not in out.stderr
