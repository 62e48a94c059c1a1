"""The device the worker evaluates on: a CUDA GPU through torch, or the CPU (for the harness's
own tests). Timers, cache flushing and health checks differ; everything else is shared."""

from __future__ import annotations

import ctypes
import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# Substrings of the names of kernels the harness itself launches (kernel_activity).
HARNESS_KERNEL_MARKS = ("at::native", "at_cuda_detail", "spin_kernel", "socratic_harness::")


class FatalDeviceError(RuntimeError):
    """The device context is unusable (illegal address, launch failure, ...): the worker
    process must end, and the executor continues in a fresh one."""


class Device(ABC):
    name: str
    torch_device: torch.device

    @property
    def stream_handle(self) -> int:
        return 0

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def flush_cache(self) -> None: ...

    @abstractmethod
    def time_call(self, fn: Callable[[], None]) -> Callable[[], float]:
        """Enqueue fn between two timestamps; returns a function that gives milliseconds
        once the device has been synchronized."""

    def check_healthy(self) -> None:  # noqa: B027 (optional hook)
        """Raise FatalDeviceError when the context no longer works."""

    def hold(self, ms: float) -> None:  # noqa: B027 (optional hook)
        """Keep the stream busy for about `ms` (a spinning kernel), so that what the host
        enqueues next is queued before the device gets to it: a timed call then measures the
        device, not the host's launch latency."""

    def null_call(self) -> None:  # noqa: B027 (optional hook)
        """Enqueue the smallest kernel there is on the harness stream: the control of the
        wall-clock cross-check (what a launch and a synchronization cost the host right now)."""

    def flush_floor_ms(self) -> float:
        """A floor of the device time one flush_cache takes (half the fastest of a few, measured
        once): harness work a timed call's hold may count as already queued (timing.Ahead).
        0 where nothing is known."""
        return 0.0

    def marker(self) -> Callable[[], bool]:
        """A mark at the end of what the harness stream holds now: the function returned says
        whether the device has got past it. Where calls run as they are made (the CPU), at once."""
        return lambda: True

    def release_memory(self) -> None:  # noqa: B027 (optional hook)
        """Drop cached allocations so the next scenario gets fresh memory."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def stream_tail(self, fn: Callable[[], None]) -> tuple[float, float]:
        """Run fn once: (ms until the harness stream has finished it, ms the device stays busy
        after that). Work on another stream or deferred past the call shows in the second."""
        t0 = time.perf_counter()
        fn()
        self.synchronize()
        return (time.perf_counter() - t0) * 1e3, 0.0

    def kernel_activity(self, fn: Callable[[], None], calls: int) -> list[KernelActivity] | None:
        """The kernels the profiler saw while fn ran `calls` times (None: no profiler here)."""
        return None


@dataclass(frozen=True)
class KernelActivity:
    """One kernel execution as the profiler recorded it."""

    name: str
    stream: int
    ms: float
    harness: bool  # a kernel of the harness itself (torch), not the candidate's


class CpuDevice(Device):
    name = "cpu"

    def __init__(self) -> None:
        self.torch_device = torch.device("cpu")
        # One thread: evaluation processes often run side by side on a small machine, and
        # oversubscribed intra-op threads make CPU timings meaningless.
        torch.set_num_threads(1)

    def synchronize(self) -> None:
        pass

    def flush_cache(self) -> None:
        pass

    def time_call(self, fn: Callable[[], None]) -> Callable[[], float]:
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1e3
        return lambda: ms


class CudaDevice(Device):
    """One GPU, a dedicated harness stream (non-blocking), and an L2 flush buffer."""

    def __init__(self, index: int = 0) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU is available")
        torch.cuda.set_device(index)
        self.torch_device = torch.device("cuda", index)
        props = torch.cuda.get_device_properties(index)
        self.name = props.name
        self.capability = (props.major, props.minor)
        self.sm_count = props.multi_processor_count
        l2 = int(getattr(props, "L2_cache_size", 0) or 50 << 20)
        # Zeroing twice the L2 evicts everything the previous call left there.
        self._flush = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.int32,
                                  device=self.torch_device)
        self.stream = torch.cuda.Stream(device=self.torch_device)
        torch.cuda.set_stream(self.stream)
        # fp32 references must be true fp32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self._cycles_per_ms: float | None = None
        self._flush_floor_ms: float | None = None

    @property
    def stream_handle(self) -> int:
        return int(self.stream.cuda_stream)

    def synchronize(self) -> None:
        try:
            torch.cuda.synchronize(self.torch_device)
        except RuntimeError as exc:
            raise FatalDeviceError(_first_line(exc)) from exc

    def flush_cache(self) -> None:
        self._flush.zero_()

    def time_call(self, fn: Callable[[], None]) -> Callable[[], float]:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        fn()
        end.record(self.stream)
        return lambda: float(start.elapsed_time(end))

    def hold(self, ms: float) -> None:
        if ms <= 0:
            return
        if self._cycles_per_ms is None:
            self._cycles_per_ms = self._calibrate_spin()
        torch.cuda._sleep(int(ms * self._cycles_per_ms))

    def null_call(self) -> None:
        torch.cuda._sleep(1)

    def flush_floor_ms(self) -> float:
        if self._flush_floor_ms is None:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(6)]
            self.flush_cache()  # first use of the fill kernel
            events[0].record(self.stream)
            for e in events[1:]:
                self.flush_cache()
                e.record(self.stream)
            events[-1].synchronize()
            fastest = min(float(a.elapsed_time(b)) for a, b in itertools.pairwise(events))
            self._flush_floor_ms = max(0.0, fastest / 2)
        return self._flush_floor_ms

    def marker(self) -> Callable[[], bool]:
        reached = torch.cuda.Event()
        reached.record(self.stream)
        return reached.query

    def _calibrate_spin(self) -> float:
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # first use loads the kernel
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        torch.cuda._sleep(cycles)
        end.record(self.stream)
        end.synchronize()
        return cycles / max(1e-3, float(start.elapsed_time(end)))

    def check_healthy(self) -> None:
        try:
            probe = torch.ones(16, device=self.torch_device)
            if float(probe.sum().item()) != 16.0:
                raise FatalDeviceError("the device returned a wrong result for a probe")
            torch.cuda.synchronize(self.torch_device)
        except RuntimeError as exc:
            raise FatalDeviceError(_first_line(exc)) from exc

    def release_memory(self) -> None:
        torch.cuda.empty_cache()

    def stream_tail(self, fn: Callable[[], None]) -> tuple[float, float]:
        self.synchronize()
        done = torch.cuda.Event()
        t0 = time.perf_counter()
        fn()
        done.record(self.stream)
        done.synchronize()
        t1 = time.perf_counter()
        self.synchronize()  # device-wide: every stream of the context
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3

    def kernel_activity(self, fn: Callable[[], None], calls: int) -> list[KernelActivity] | None:
        """Kernel executions on every stream of the context (CUPTI through torch.profiler sees
        the candidate's kernels too: it traces the driver, whatever runtime launched them)."""
        from torch.profiler import ProfilerActivity, profile

        self.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            self.synchronize()
        out: list[KernelActivity] = []
        for e in prof.profiler.kineto_results.events():
            if e.device_type() != torch.autograd.DeviceType.CUDA:
                continue
            name = e.name()
            if name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")):
                continue
            out.append(KernelActivity(
                name=name, stream=int(e.device_resource_id()), ms=e.duration_ns() / 1e6,
                # torch's own kernels (fills, copies, random numbers), the hold's spin kernel, and
                # the harness's own (fresh inputs: harness/attention/fresh_fill.cu)
                harness=any(mark in name for mark in HARNESS_KERNEL_MARKS),
            ))
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "capability": f"{self.capability[0]}.{self.capability[1]}",
            "sm_count": self.sm_count,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "driver": driver_version(),
        }


def driver_version() -> str | None:
    """The NVIDIA driver's version ("580.159.04"), None where it cannot be read. Part of the
    cache keys (harness/peer_cache.py): a driver update can move the cached times. Read once
    per evaluation process, so from the kernel module's /proc file (microseconds); NVML, whose
    start costs far more, only where that file is missing."""
    try:
        words = Path("/proc/driver/nvidia/version").read_text().split()
        found = next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), None)
        if found is not None:
            return found
    except OSError:
        pass
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
    except (OSError, AttributeError):  # no NVML, or one without these entry points
        return None
    try:
        buf = ctypes.create_string_buffer(96)
        return buf.value.decode() if nvml.nvmlSystemGetDriverVersion(buf, len(buf)) == 0 else None
    except (AttributeError, UnicodeDecodeError):
        return None
    finally:
        nvml.nvmlShutdown()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def make_device(kind: str) -> Device:
    if kind == "cpu":
        return CpuDevice()
    if kind == "cuda":
        return CudaDevice()
    raise ValueError(f"unknown device kind {kind!r}")
