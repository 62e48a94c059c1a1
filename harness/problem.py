"""What the harness needs to know about a problem: its contract, suite, inputs, references,
FLOP and byte model, and peers. Attention forward (harness/attention/) is the first one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.scenario import Scenario

CUDA_ERROR_NAMES = {
    1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 9: "cudaErrorInvalidConfiguration",
    98: "cudaErrorInvalidDeviceFunction", 209: "cudaErrorNoKernelImageForDevice",
    400: "cudaErrorInvalidResourceHandle", 700: "cudaErrorIllegalAddress",
    701: "cudaErrorLaunchOutOfResources", 702: "cudaErrorLaunchTimeout",
    715: "cudaErrorIllegalInstruction", 716: "cudaErrorMisalignedAddress",
    719: "cudaErrorLaunchFailure", 801: "cudaErrorNotSupported", 999: "cudaErrorUnknown",
}


@dataclass(frozen=True)
class KernelSpec:
    """Where a kernel comes from: a compiled shared library, or (CPU tests) a Python callable
    given as `module:function`."""

    label: str
    kind: str  # "library" | "python"
    target: str

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "kind": self.kind, "target": self.target}

    @classmethod
    def from_dict(cls, d: dict[str, str]) -> KernelSpec:
        return cls(label=d["label"], kind=d["kind"], target=d["target"])


class LoadedKernel(ABC):
    """A kernel ready to be called on a problem's buffers."""

    label: str

    @abstractmethod
    def workspace_bytes(self, buffers: Any) -> int: ...

    @abstractmethod
    def __call__(self, buffers: Any, stream: int) -> int:
        """Launch on `stream`; returns a CUDA error code (0 = success)."""

    def last_error(self) -> int:
        """A launch error the kernel's own runtime recorded but did not return (0 = none)."""
        return 0

    def error_name(self, code: int) -> str:
        return CUDA_ERROR_NAMES.get(code, f"cudaError {code}")

    def reset_persisting_l2(self) -> int:
        """Set the device's persisting-L2 limit to 0 and evict persisting lines; returns the
        limit in bytes found before (-1: not available here)."""
        return -1


Peer = Callable[[Any], torch.Tensor]  # runs on buffers, returns its own output tensor


class InputVersions(ABC):
    """Fresh contents for one input set in the timing loop: each version rewrites the set's
    tensors in place (same addresses) so that its exact answer follows from the validated
    answer, without a new reference. `history` lists the versions written, 0 = validated."""

    history: list[int]

    @abstractmethod
    def advance(self) -> None:
        """Rewrite the set with the next version (before a call, outside the timed region)."""

    @abstractmethod
    def expected(self, version: int) -> torch.Tensor:
        """The exact answer for a version's contents."""

    @abstractmethod
    def probe(self) -> torch.Tensor:
        """Change a small, randomly placed part of the set and return the new exact answer."""

    @abstractmethod
    def last_versions(self, n: int) -> list[int]:
        """Up to n distinct versions before the last one, most recent first."""


class Problem(ABC):
    name: str
    contract_header: Path
    baseline_source: Path
    not_supported_code: int  # the error code a kernel returns to refuse a scenario

    @abstractmethod
    def suite(self) -> list[Scenario]: ...

    @abstractmethod
    def flops(self, s: Scenario) -> int: ...

    @abstractmethod
    def min_bytes(self, s: Scenario) -> int:
        """Fewest bytes any implementation must move through device memory."""

    @abstractmethod
    def make_inputs(self, s: Scenario, seed: int, device: torch.device) -> list[torch.Tensor]:
        """Fresh, never-zero random inputs; the distribution varies with the seed."""

    @abstractmethod
    def new_output(self, s: Scenario, device: torch.device) -> torch.Tensor:
        """An output buffer poisoned with NaN, so unwritten elements are seen."""

    @abstractmethod
    def buffers(
        self, s: Scenario, inputs: Sequence[torch.Tensor], out: torch.Tensor,
        workspace: torch.Tensor | None,
    ) -> Any: ...

    @abstractmethod
    def reference(
        self, s: Scenario, inputs: Sequence[torch.Tensor], dtype: torch.dtype
    ) -> torch.Tensor: ...

    @abstractmethod
    def peers(self, s: Scenario) -> dict[str, Peer]: ...

    def input_versions(
        self, s: Scenario, inputs: list[torch.Tensor], validated: torch.Tensor, seed: int,
        count: int,
    ) -> InputVersions | None:
        """Fresh contents for the timing loop (None: the problem has none; sets then rotate
        with unchanged contents)."""
        return None

    def explain_failure(
        self, s: Scenario, inputs: Sequence[torch.Tensor], out: torch.Tensor, tolerance: float
    ) -> str | None:
        """A problem-specific reading of a wrong output (None: nothing more to say)."""
        return None

    @abstractmethod
    def load_kernel(self, spec: KernelSpec) -> LoadedKernel: ...
