"""Recording stand-ins for the worker's tests on the CPU backend: an operation counter, a
device that logs its waits, a problem that logs its references, peers that log the layout they
run on, and the evaluator of the correct CPU kernel with one peer that builds plans."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import harness.worker as worker
from harness.attention.forward import AttentionForward
from harness.device import CpuDevice
from harness.job import KernelSpec
from harness.scenario import Scenario
from harness.settings import EvalSettings
from tests.cpu_kernels import _exact
from tests.harness.support import FAST

CPU = torch.device("cpu")
GQA = Scenario("gqa", "x", 2, 33, 47, 8, 2, 32, causal=True)


class OpCounter(TorchDispatchMode):
    """Counts the aten operations run inside it, by name ("normal_", "copy_", ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[func.__name__.split(".")[0]] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting() -> Iterator[Counter[str]]:
    mode = OpCounter()
    with mode:
        yield mode.ops


class Recorder(CpuDevice):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def synchronize(self) -> None:
        self.log.append("sync")


class LoggedProblem(AttentionForward):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def reference(self, s: Scenario, buffers: Any, dtype: torch.dtype) -> torch.Tensor:
        self.log.append("ref")
        return super().reference(s, buffers, dtype)


def _peer(log: list[str], name: str, wrong_on_strided: bool) -> Callable[[Any], torch.Tensor]:
    def run(bufs: Any) -> torch.Tensor:
        strided = not bufs.k.is_contiguous()
        log.append(f"peer {name} {'strided' if strided else 'contiguous'}")
        out = _exact(bufs)
        return out * 1.5 if (strided and wrong_on_strided) else out
    return run


class NamedPeer:
    def __init__(self, log: list[str], name: str, s: Scenario, plans: bool) -> None:
        self.log, self.name, self.s, self.plans_per_shape = log, name, s, plans
        self.inputs: list[list[torch.Tensor]] = []

    def __call__(self, bufs: Any) -> torch.Tensor:
        layout = "strided" if not bufs.k.is_contiguous() else "contiguous"
        self.log.append(f"{self.name} {self.s.name} {layout}")
        self.inputs.append([bufs.q.clone(), bufs.k.clone(), bufs.v.clone()])
        return _exact(bufs)


def planned_only(problem: AttentionForward, log: list[str]) -> worker.ScenarioEvaluator:
    """An evaluator of the correct CPU kernel whose one peer builds plans per layout (NamedPeer)."""

    class WithPeers(worker.ScenarioEvaluator):
        def _wanted_peers(self, s: Scenario) -> dict[str, Callable[[Any], torch.Tensor]]:
            return {"planned": NamedPeer(log, "planned", s, True)}

    settings = EvalSettings(device="cpu", peers=("planned",), timing=FAST)
    candidate = problem.load_kernel(KernelSpec("correct", "python", "tests.cpu_kernels:correct"))
    return WithPeers(problem, Recorder(log), candidate, None, settings, None)


class HugeDoesNotFit(AttentionForward):
    """A problem whose inputs for the scenario named "huge" do not fit beside what the device
    holds (a large decode shape on a small GPU)."""

    def make_inputs(self, s: Scenario, seed: int, device: torch.device) -> list[torch.Tensor]:
        if s.name == "huge":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return super().make_inputs(s, seed, device)
