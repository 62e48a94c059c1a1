"""The device queue: at most one candidate is evaluated (and so timed) on a GPU at a time,
and CPU evaluations (the harness's Python stand-in kernels) take turns as well. Sessions
that need a GPU on a machine without one wait, with a clear status, instead of failing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from harness.executor import gpu_device_nodes  # no torch: a look at /dev and /proc

GPU = "cuda:0"  # the harness's LocalExecutor evaluates on device 0
CPU = "cpu"

NO_GPU = "waiting: no GPU available on this machine (checking again every {poll:g} s)"
GPU_BUSY = "waiting for the GPU: another candidate is being evaluated"


def probe_gpu() -> bool:
    """Whether torch sees a CUDA GPU. Without NVIDIA device nodes the answer is no at once (no
    process); with them, torch is asked in a child process so that the server process itself
    never initialises CUDA."""
    if not gpu_device_nodes():
        return False
    try:
        out = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
            capture_output=True, text=True, timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip().endswith("True")


WaitFn = Callable[[str], Awaitable[None]]


class DeviceQueue:
    """With `cluster` set, evaluations are not queued here: the cluster's scheduler gives each
    of its GPUs one candidate at a time (harness/cluster.py), so sessions evaluate at once."""

    def __init__(self, poll_s: float = 30.0, gpu_probe: Callable[[], bool] = probe_gpu,
                 cluster: str | None = None) -> None:
        self.poll_s = poll_s
        self.cluster = cluster
        self._cluster_slots = 0
        self._probe = gpu_probe
        self._locks: dict[str, asyncio.Lock] = {GPU: asyncio.Lock(), CPU: asyncio.Lock()}
        self._gpu_seen: tuple[float, bool] | None = None
        self._probing: asyncio.Lock | None = None  # one probe at a time for the whole server
        self.holders: dict[str, str] = {}  # device -> what is being evaluated on it
        self.waiting: dict[str, list[str]] = {GPU: [], CPU: []}  # device -> who waits for it, in order

    async def gpu_available(self) -> bool:
        """The server's one answer, re-asked at most every poll_s whoever asks (every waiting
        session and every page share it; concurrent askers wait for the one probe running)."""
        if self.cluster:  # the cluster's workers own the GPUs; shards wait there for one
            self._gpu_seen = (time.monotonic(), True)
            return True
        if self._probing is None:
            self._probing = asyncio.Lock()
        async with self._probing:
            now = time.monotonic()
            if self._gpu_seen is not None and now - self._gpu_seen[0] < self.poll_s:
                return self._gpu_seen[1]
            found = await asyncio.to_thread(self._probe)
            self._gpu_seen = (time.monotonic(), found)
            return found

    @property
    def gpu_state(self) -> str:
        """"gpu", "no-gpu", or "unknown" (not asked yet): for badges, never probes."""
        if self._gpu_seen is None:
            return "unknown"
        return "gpu" if self._gpu_seen[1] else "no-gpu"

    def forget_gpu_probe(self) -> None:
        self._gpu_seen = None

    @asynccontextmanager
    async def acquire(self, device: str, holder: str, on_wait: WaitFn) -> AsyncIterator[None]:
        """Hold `device` for one evaluation. `on_wait(reason)` is awaited whenever the caller
        has to wait (no GPU on this machine, or the device is busy)."""
        if self.cluster:
            self._cluster_slots += 1
            slot = f"cluster {self.cluster} #{self._cluster_slots}"
            self.holders[slot] = holder
            try:
                yield
            finally:
                self.holders.pop(slot, None)
            return
        queue = self.waiting[device]
        queue.append(holder)
        try:
            if device == GPU:
                told = ""
                while not await self.gpu_available():
                    reason = NO_GPU.format(poll=self.poll_s) + self._place(queue, holder)
                    if reason != told:  # said again only when the place in line changed
                        await on_wait(reason)
                        told = reason
                    await asyncio.sleep(self.poll_s)
            lock = self._locks[device]
            if lock.locked():
                busy = GPU_BUSY if device == GPU else "waiting for the CPU evaluation slot"
                await on_wait(busy + self._place(queue, holder))
            await lock.acquire()
        finally:
            queue.remove(holder)
        try:
            self.holders[device] = holder
            yield
        finally:
            self.holders.pop(device, None)
            lock.release()

    @staticmethod
    def _place(queue: list[str], holder: str) -> str:
        """Where `holder` stands among the sessions waiting for this device (asyncio's lock
        serves its waiters in arrival order, so this is the order they will run in)."""
        if len(queue) < 2:
            return ""
        return f" ({queue.index(holder) + 1} of {len(queue)} waiting)"
