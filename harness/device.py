"""The device the worker evaluates on: a CUDA GPU through torch, or the CPU (for the harness's
own tests). Timers, cache flushing and health checks differ; everything else is shared."""

from __future__ import annotations

import ctypes
import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from harness.activity import KernelActivity, StreamUse

# Substrings of the names of kernels the harness itself launches. No longer how the profiler tells
# them apart (kernel_activity attributes by origin); the static checks refuse them in a candidate.
HARNESS_KERNEL_MARKS = ("at::native", "at_cuda_detail", "spin_kernel", "socratic_harness::")
HARNESS_CANDIDATE_RANGE = "socratic.candidate_call"  # = harness.integrity.CANDIDATE_RANGE


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

    def time_call_guarded(self, fn: Callable[[], None], fence: bool, idle: bool
                          ) -> tuple[Callable[[], float], Callable[[], StreamUse] | None]:
        """time_call, where `fence`: the default streams wait on the start event and the timed
        stream waits on them before the end event (what the call put there is its own time); and
        `idle`: markers on the default streams before the start event tell whether anything was
        still queued there when the call started (either or both). The second function (None where
        nothing is known) reads what the default streams did, once the device has been synchronized."""
        return self.time_call(fn), None

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
        self._events: _DriverEvents | None = None

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

    def time_call_guarded(self, fn: Callable[[], None], fence: bool, idle: bool
                          ) -> tuple[Callable[[], float], Callable[[], StreamUse] | None]:
        if not (fence or idle):
            return self.time_call(fn), None
        d = self._driver()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        marks: list[int] = []
        if idle:  # recorded before the start event: they pass when what is queued there is done
            marks = [d.event(), d.event()]
            d.record(marks[0], CU_STREAM_LEGACY)
            d.record(marks[1], CU_STREAM_PER_THREAD)
        start.record(self.stream)
        after: list[int] = []
        if fence:
            d.wait(CU_STREAM_LEGACY, start.cuda_event)
            d.wait(CU_STREAM_PER_THREAD, start.cuda_event)
        fn()
        if fence:
            after = [d.event(), d.event(), d.event()]  # the call's own end, legacy, per-thread
            d.record(after[0], self.stream_handle)
            d.record(after[1], CU_STREAM_LEGACY)
            d.record(after[2], CU_STREAM_PER_THREAD)
            d.wait(self.stream_handle, after[1])
            d.wait(self.stream_handle, after[2])
        end.record(self.stream)

        def use() -> StreamUse:
            s0 = start.cuda_event
            try:
                fenced = (StreamUse(d.elapsed(s0, after[1]), d.elapsed(s0, after[2]),
                                    d.elapsed(after[0], after[1]), d.elapsed(after[0], after[2]))
                          if fence else StreamUse())
                if idle:
                    return replace(fenced, legacy_busy_at_start=d.elapsed(s0, marks[0]),
                                   per_thread_busy_at_start=d.elapsed(s0, marks[1]))
                return fenced
            finally:
                for ev in (*marks, *after):
                    d.destroy(ev)

        return (lambda: float(start.elapsed_time(end))), use

    def _driver(self) -> _DriverEvents:
        if self._events is None:
            self._events = _DriverEvents()
        return self._events

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
        the candidate's kernels too: it traces the driver, whatever runtime launched them), each
        attributed by origin (harness/integrity.py: attribute): the worker opens a profiler range
        around each candidate call, and a kernel is the harness's only where the profiler saw the
        harness launch it, outside those ranges. Names prove nothing (issue 47, class 1)."""
        from torch.profiler import ProfilerActivity, profile

        from harness.integrity import ProfiledEvent, attribute

        self.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            self.synchronize()
        events: list[ProfiledEvent] = []
        for e in prof.profiler.kineto_results.events():
            name = e.name()
            start = int(e.start_ns())
            end = start + int(e.duration_ns())
            corr = int(getattr(e, "correlation_id", lambda: 0)() or 0)
            if e.device_type() == torch.autograd.DeviceType.CUDA:
                # Not kernels: copies, and the GPU-side span kineto draws for each candidate range
                # (counted as a kernel, it doubled the candidate's time: hidden work on the gallery
                # leader, H100 and H200).
                if name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")) or name == HARNESS_CANDIDATE_RANGE:
                    continue
                events.append(ProfiledEvent("kernel", name, start, end, corr, int(e.device_resource_id())))
            elif name == HARNESS_CANDIDATE_RANGE:
                events.append(ProfiledEvent("range", name, start, end))
            elif corr and ("Launch" in name or name.startswith(("cuda", "cu"))):
                events.append(ProfiledEvent("launch", name, start, end, corr))
        return attribute(events, fallback_marks=HARNESS_KERNEL_MARKS)

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


# The driver's handles of the two default streams (cuda.h): usable wherever a CUstream is.
CU_STREAM_LEGACY = 0x1
CU_STREAM_PER_THREAD = 0x2


class _DriverEvents:
    """Events on the default streams through the driver API (libcuda, already loaded by torch):
    torch has no handle for the per-thread default stream, and cudaStreamLegacy's value collides
    with its own stream ids. Runtime events (torch's) are driver events, so both mix."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        self._create = lib.cuEventCreate
        self._record = lib.cuEventRecord
        self._wait = lib.cuStreamWaitEvent
        self._elapsed = lib.cuEventElapsedTime
        self._destroy = lib.cuEventDestroy_v2
        for f in (self._record, self._wait, self._elapsed, self._destroy, self._create):
            f.restype = ctypes.c_int
        self._record.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._wait.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        self._elapsed.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
        self._destroy.argtypes = [ctypes.c_void_p]
        self._create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise FatalDeviceError(f"{what} failed with CUresult {rc}")

    def event(self) -> int:
        ev = ctypes.c_void_p()
        self._check(self._create(ctypes.byref(ev), 0), "cuEventCreate")
        return int(ev.value or 0)

    def record(self, event: int, stream: int) -> None:
        self._check(self._record(event, stream), "cuEventRecord")

    def wait(self, stream: int, event: int) -> None:
        self._check(self._wait(stream, event, 0), "cuStreamWaitEvent")

    def elapsed(self, a: int, b: int) -> float:
        ms = ctypes.c_float()
        self._check(self._elapsed(ctypes.byref(ms), a, b), "cuEventElapsedTime")
        return float(ms.value)

    def destroy(self, event: int) -> None:
        self._destroy(event)


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
