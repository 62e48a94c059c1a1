"""The interface every problem implements (Problem: its contract, suite, inputs, references,
FLOP and byte model, peers) and the types the worker handles through it: LoadedKernel, Peer,
TimedInputs. Attention forward (harness/attention/forward.py) is the first problem; problems are
looked up by name in harness/problem_registry.py."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.job import KernelSpec  # where a kernel comes from (torch-free)
from harness.scenario import Scenario

CUDA_ERROR_NAMES = {
    1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 9: "cudaErrorInvalidConfiguration",
    98: "cudaErrorInvalidDeviceFunction", 209: "cudaErrorNoKernelImageForDevice",
    400: "cudaErrorInvalidResourceHandle", 700: "cudaErrorIllegalAddress",
    701: "cudaErrorLaunchOutOfResources", 702: "cudaErrorLaunchTimeout",
    715: "cudaErrorIllegalInstruction", 716: "cudaErrorMisalignedAddress",
    719: "cudaErrorLaunchFailure", 801: "cudaErrorNotSupported", 999: "cudaErrorUnknown",
}


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


# Runs on buffers, returns its own output tensor in the candidate's output layout.
Peer = Callable[[Any], torch.Tensor]


class TimedInputs(ABC):
    """Fresh contents for every candidate call of the timing loop, for one input set: before
    each call the set's tensors are rewritten in place (same addresses) with new random contents
    from a nonce the kernel cannot know, and the set's output of the call before is kept. After
    the calls, `Problem.check_timed` verifies sampled rows of every kept output (chosen then) against a
    reference; `probe` and `restore` serve the workspace probe and the re-run on the validated
    inputs (docs/verifier.md)."""

    @abstractmethod
    def before_call(self) -> None:
        """Keep the output of this set's previous call, write fresh contents (outside the timed
        region)."""

    @abstractmethod
    def keep_last(self) -> None:
        """Keep the output of this set's last call (after the loop)."""

    def after_call(self) -> None:  # noqa: B027 (optional hook)
        """The call's end has been enqueued: keep its output now, before any other candidate
        call (issue 47, class 2); the next before_call compares the output buffer with it."""

    def tamper_reason(self) -> str | None:
        """Whether an output changed after its call ended (read once, after the loop)."""
        return None

    @abstractmethod
    def probe(self) -> str | None:
        """Change a small, randomly placed part of the inputs, call the candidate (the callback
        given at creation) with the workspace as the previous call left it, judge the output."""

    @abstractmethod
    def restore(self) -> None:
        """Write the contents validated before timing back into the set."""


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
        workspace: torch.Tensor | None, trial: int = 0, seed: int = 0,
    ) -> Any:
        """The kernel's arguments; contract fields that rotate by trial (softmax_scale) take
        the trial's value."""

    @abstractmethod
    def reference(self, s: Scenario, buffers: Any, dtype: torch.dtype) -> torch.Tensor:
        """The answer for the buffers' inputs and contract fields, computed in `dtype`."""

    def call_fields(self, buffers: Any) -> tuple[Any, ...]:
        """The contract fields of a call besides its inputs' contents (softmax_scale, causal):
        with the inputs' digest they tell the answer key's trial from another
        (harness/answer_key.py: call_digest)."""
        return ()

    @abstractmethod
    def peers(self, s: Scenario) -> dict[str, Peer]: ...

    def unavailable_peers(self, wanted: Sequence[str]) -> dict[str, str]:
        """Peers asked for that cannot run on this machine, with the reason."""
        return {}

    def peer_layout(self, s: Scenario, buffers: Any) -> Any:
        """The buffers a peer that builds a plan per shape and layout (`plans_per_shape`) runs
        on: the same contents and fields in one layout for every input set, so that one plan
        serves them all. The same object where the buffers are in that layout already."""
        return buffers

    def refresh_peer_layout(self, source: Any, peer_buffers: Any) -> None:
        """Bring peer_layout's buffers up to the source's current contents and fields (outside
        any timed region); nothing where they are the same object."""
        return None

    def prepare(self, device: torch.device) -> None:
        """Start what the problem's own device code needs (a build of the harness's kernels)
        without waiting for it: the worker calls this as soon as it knows its device."""
        return None

    def harness_kernels(self, device: torch.device) -> dict[str, Any]:
        """Wait for what prepare() started; facts for the report (which implementation of the
        problem's own device work runs, and why)."""
        return {}

    def timed_inputs(
        self, s: Scenario, set_index: int, inputs: list[torch.Tensor], buffers: Any,
        call: Callable[[], None], counter: list[int],
    ) -> TimedInputs | None:
        """Fresh contents for every timed call of one input set (None: the problem has none;
        sets then rotate with unchanged contents). `call` runs the candidate once on the set;
        `counter` numbers the candidate's calls across every set of the scenario."""
        return None

    def check_timed(self, sets: Sequence[TimedInputs]) -> str | None:
        """Verify the outputs the timed calls left (sampled after the fact); the reason of the
        first wrong one, or None."""
        return None

    def explain_failure(self, s: Scenario, buffers: Any, tolerance: float) -> str | None:
        """A problem-specific reading of a wrong output (None: nothing more to say)."""
        return None

    @abstractmethod
    def load_kernel(self, spec: KernelSpec) -> LoadedKernel: ...
