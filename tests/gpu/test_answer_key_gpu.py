"""The answer key on a real GPU (harness/answer_key.py): the arena travels by CUDA IPC, the
key's references come from its own CUDA context, and an evaluation judged by it reaches the
verdicts and errors of one that computes its references in the worker."""

from __future__ import annotations

import glob
import math
from pathlib import Path

import pytest

from harness.attention.suite import default_suite
from harness.evaluate import evaluate_source
from harness.executor import LocalExecutor
from harness.settings import EvalSettings
from tests.conftest import ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

BASELINE = ROOT / "kernels" / "attention" / "baseline.cu"


def test_a_keyed_evaluation_matches_one_judged_in_the_worker_peers_included() -> None:
    # One scenario of each category and head dim: both trial layouts, every peer's slot.
    seen: set[tuple[str, int]] = set()
    scenarios = []
    for s in default_suite():
        if (s.category, s.head_dim) not in seen:
            seen.add((s.category, s.head_dim))
            scenarios.append(s)
    settings = EvalSettings(measure=False)
    keyed = evaluate_source(BASELINE, scenarios, settings=settings)  # its own executor: warmed
    plain = evaluate_source(BASELINE, scenarios, settings=settings, executor=LocalExecutor())
    info = keyed.settings["device_info"]["answer_key"]
    assert info["trials"] == 2 * len(scenarios) and info["not_computed"] == 0
    assert info["trials_judged_in_worker"] == 0, info
    assert "answer_key" not in plain.settings["device_info"]
    for a, b in zip(keyed.scenarios, plain.scenarios, strict=True):
        assert (a.scenario, a.status, a.reason) == (b.scenario, b.status, b.reason)
        assert a.max_error is not None and b.max_error is not None
        assert a.tolerance is not None and b.tolerance is not None
        # Both fp32 references on the same GPU; cuBLAS may pick other algorithms for the
        # chunks each process sizes to its free memory, so equal up to fp32 rounding.
        assert math.isclose(a.max_error, b.max_error, rel_tol=1e-2, abs_tol=1e-6)
        assert math.isclose(a.tolerance, b.tolerance, rel_tol=1e-2, abs_tol=1e-6)
        assert {k: p.status for k, p in a.peers.items()} == {k: p.status for k, p in b.peers.items()}


def test_a_keyed_evaluation_leaves_no_shared_memory_of_its_processes_behind() -> None:
    """The worker sends its arena over CUDA IPC, which makes a file of reference counts in
    /dev/shm (torch_<pid>_...) that the last process to let go unlinks; a worker is killed
    after its job or leaves without destructors (harness/executor.py: _leave), and under the
    sandbox could not unlink it anyway. The executor removes it: nothing of an ended process
    stays, evaluation after evaluation."""
    before = set(glob.glob("/dev/shm/torch_*"))
    scenarios = default_suite()[:2]
    for _ in range(2):
        evaluate_source(BASELINE, scenarios, settings=EvalSettings(measure=False))
    left = sorted(p for p in set(glob.glob("/dev/shm/torch_*")) - before
                  if not Path(f"/proc/{Path(p).name.split('_')[1]}").exists())
    assert left == []
