"""An evaluation process whose executor is killed stops at once (harness/lifeline.py), so it can
never go on timing on a GPU that the next shard or candidate has already been given."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.lifeline import ORPHANED_EXIT

ROOT = Path(__file__).resolve().parents[1]

# The executor's process: a LocalExecutor evaluating a kernel that hangs on causal scenarios,
# so its worker process is busy (in the kernel) when the executor dies.
EXECUTOR = """
from harness.executor import LocalExecutor
from harness.job import KernelSpec
from harness.settings import EvalSettings
from harness.job import WorkerJob
from tests.test_executor import FAST, SCENARIOS

job = WorkerJob("attention-forward", KernelSpec("hang", "python", "tests.cpu_kernels:hang_on_causal"),
                KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"), SCENARIOS,
                EvalSettings(device="cpu", peers=(), timing=FAST))
print("started", flush=True)
LocalExecutor(spare=%s).run(job)
"""


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc), evaluation workers only."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and "multiprocessing" in cmdline and "resource_tracker" not in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def run_and_kill_executor(spare: bool) -> tuple[list[int], float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", EXECUTOR % spare], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = children(proc.pid)
        assert workers, "the executor started no worker process"
        time.sleep(1.0)  # the worker is inside the hanging kernel by now
        assert all(alive(w) for w in workers)
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(10)
        while any(alive(w) for w in workers) and time.monotonic() - killed < 10:
            time.sleep(0.02)
        survivors = [w for w in workers if alive(w)]
        for w in survivors:  # never leave a hanging worker behind a failed test
            os.kill(w, signal.SIGKILL)
        return survivors, time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in children(proc.pid) if proc.poll() is None else []:
            os.kill(w, signal.SIGKILL)


def test_a_worker_whose_executor_is_killed_exits_within_a_fraction_of_a_second() -> None:
    survivors, seconds = run_and_kill_executor(spare=False)
    assert survivors == [] and seconds < 2.0


def test_a_spare_started_worker_follows_its_executor_too() -> None:
    survivors, seconds = run_and_kill_executor(spare=True)
    assert survivors == [] and seconds < 2.0


def test_a_worker_whose_executor_died_before_it_started_watching_exits_at_once() -> None:
    """The executor passes its pid: a worker that finds another parent once torch is imported
    (its executor died meanwhile) exits instead of running the job."""
    code = ("import os\nfrom harness.lifeline import follow_parent\n"
            "follow_parent(os.getppid() + 100000)\nprint('ran on', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == ORPHANED_EXIT and "ran on" not in done.stdout
    same = subprocess.run([sys.executable, "-c", code.replace(" + 100000", "")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert same.returncode == 0 and "ran on" in same.stdout
