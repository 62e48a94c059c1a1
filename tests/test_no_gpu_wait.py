"""Without a GPU a waiting session costs nothing per poll: the server's device queue asks once
whether the machine has an NVIDIA device at all (a look at /dev and /proc), and no child
process (no `python -c "import torch"`) runs while sessions wait."""

from __future__ import annotations

import asyncio
import resource

import pytest

from app.runner.devices import GPU, NO_GPU, DeviceQueue, gpu_device_nodes

pytestmark = pytest.mark.skipif(gpu_device_nodes(), reason="this machine has an NVIDIA device")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_sessions_waiting_for_a_gpu_start_no_process_and_share_one_answer() -> None:
    queue = DeviceQueue(poll_s=0.05)  # the server's default probe, polled 20 times a second
    waits: list[str] = []

    async def on_wait(reason: str) -> None:
        waits.append(reason)

    async def session() -> None:
        async with queue.acquire(GPU, "candidate", on_wait):
            raise AssertionError("no GPU here: the evaluation must keep waiting")

    async def main() -> float:
        before_cpu = children_cpu_s()
        tasks = [asyncio.create_task(session()) for _ in range(3)]  # three waiting sessions
        await asyncio.sleep(1.5)  # about 30 polls each
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return children_cpu_s() - before_cpu

    spent = asyncio.run(main())
    # Each session told its reason once; the server knows there is no GPU (a badge of its own).
    assert waits == [NO_GPU.format(poll=0.05)] * 3
    assert queue.gpu_state == "no-gpu"
    # No child process ran: importing torch alone costs seconds of CPU.
    assert spent < 0.05, f"waiting sessions spent {spent:.2f} s of CPU in child processes"
