"""An evaluation process whose executor is killed stops at once (harness/lifeline.py), so it can
never go on timing on a GPU that the next shard or candidate has already been given."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.lifeline import ORPHANED_EXIT
from tests.conftest import ROOT
from tests.cpu_kernels import HANG_MARKS_ENV
from tests.harness.support import alive, children
from tests.waiting import wait_until

# The executor's process: a LocalExecutor evaluating a kernel that hangs on causal scenarios,
# so its worker process is busy (in the kernel) when the executor dies.
EXECUTOR = """
from harness.executor import LocalExecutor
from harness.job import KernelSpec
from harness.settings import EvalSettings
from harness.job import WorkerJob
from tests.harness.support import FAST, SCENARIOS

job = WorkerJob("attention-forward", KernelSpec("hang", "python", "tests.cpu_kernels:hang_on_causal"),
                KernelSpec("baseline", "python", "tests.cpu_kernels:correct_slow"), SCENARIOS,
                EvalSettings(device="cpu", peers=(), timing=FAST, hardening=False))  # its mark is a file
print("started", flush=True)
LocalExecutor(spare=%s).run(job)
"""


def run_and_kill_executor(spare: bool, marks: Path) -> tuple[list[int], float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), HANG_MARKS_ENV: str(marks)}
    proc = subprocess.Popen([sys.executable, "-c", EXECUTOR % spare], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"

        def hanging() -> list[int]:  # the executor's workers, once one of them is in the kernel
            found = children(proc.pid)
            return found if any((marks / str(w)).exists() for w in found) else []

        workers = wait_until(hanging, 60, "a worker process inside the hanging kernel")
        assert all(alive(w) for w in workers)
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(10)
        with contextlib.suppress(TimeoutError):  # the survivors and the time fail the test
            wait_until(lambda: not any(alive(w) for w in workers), 10, "the orphaned workers to exit")
        return [w for w in workers if alive(w)], time.monotonic() - killed
    finally:
        for w in workers:  # never leave a hanging worker behind a failed test
            if alive(w):
                os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            for w in children(proc.pid):
                os.kill(w, signal.SIGKILL)
            proc.kill()


def test_a_worker_whose_executor_is_killed_exits_within_a_fraction_of_a_second(tmp_path: Path) -> None:
    survivors, seconds = run_and_kill_executor(spare=False, marks=tmp_path)
    assert survivors == [] and seconds < 2.0


def test_a_spare_started_worker_follows_its_executor_too(tmp_path: Path) -> None:
    survivors, seconds = run_and_kill_executor(spare=True, marks=tmp_path)
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
