"""What an evaluation does before its first scenario: the CLI starts its worker process before
it imports torch, and a spare worker imports ahead what the first FA3 call would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_the_executor_module_imports_without_torch() -> None:
    code = ("import sys; from harness.executor import LocalExecutor, gpu_device_nodes; "
            "import harness.cli; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_eval_starts_its_worker_before_it_asks_torch_for_a_gpu_and_ends_it_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import harness.evaluate
    import harness.executor
    from harness.cli import build_parser

    steps: list[str] = []
    monkeypatch.setattr(harness.executor, "gpu_device_nodes", lambda: True)
    monkeypatch.setattr(harness.executor.LocalExecutor, "prestart", lambda self: steps.append("prestart"))
    monkeypatch.setattr(harness.executor.LocalExecutor, "close", lambda self: steps.append("close"))

    def no_gpu() -> bool:
        steps.append("torch asked")
        return False

    monkeypatch.setattr(harness.evaluate, "gpu_available", no_gpu)
    args = build_parser().parse_args(["eval", str(ROOT / "kernels" / "attention" / "baseline.cu")])
    assert args.func(args) == 3
    assert steps == ["prestart", "torch asked", "close"]


_FIRST_CUSTOM_OP_CALL = r"""
import sys
import torch
from harness.attention.peers import warm_first_use
warmed = warm_first_use({fa3})
before = set(sys.modules)
@torch.library.custom_op("socratic_probe::f", mutates_args=(), device_types="cpu")
def f(x: torch.Tensor) -> torch.Tensor:
    return x.clone()
f(torch.ones(3))
print(len(warmed), len(set(sys.modules) - before), torch.cuda.is_initialized())
"""


@pytest.mark.parametrize("fa3", [True, False])
def test_a_spare_worker_imports_what_the_first_fa3_call_would(fa3: bool) -> None:
    """FA3's operator is a torch.library custom op; the first call of one imports hundreds of
    modules (torch._dynamo and its dependencies). Warmed ahead (where fa3-fwd is installed),
    that call imports nothing more, and the warm-up touches no CUDA."""
    out = subprocess.run([sys.executable, "-c", _FIRST_CUSTOM_OP_CALL.format(fa3=fa3)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    warmed, imported_by_first_call, cuda = int(out[0]), int(out[1]), out[2]
    assert cuda == "False"
    if fa3:
        assert warmed > 100 and imported_by_first_call == 0
    else:
        assert warmed == 0 and imported_by_first_call > 100



def test_fa3_is_found_installed_without_importing_it(tmp_path: Path) -> None:
    """The warm-up's condition: a module fa3_fwd_interface on the path counts, and finding it
    runs none of its code (the real one loads CUDA libraries)."""
    (tmp_path / "fa3_fwd_interface.py").write_text("raise SystemExit('imported')\n")
    code = "from harness.attention.peers import fa3_installed; print(fa3_installed())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=env, cwd=ROOT).stdout.strip()
    assert found == "True"
    env["PYTHONPATH"] = str(ROOT)
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env, cwd=ROOT).stdout.strip() == "False"
