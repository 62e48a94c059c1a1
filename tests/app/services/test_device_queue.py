"""Without a GPU a waiting session costs nothing per poll: the server's device queue asks once
whether the machine has an NVIDIA device at all (a look at /dev and /proc), and no child
process (no `python -c "import torch"`) runs while sessions wait."""

from __future__ import annotations

import asyncio
import resource
import time

import pytest

from app.services.devices import GPU, GPU_BUSY, NO_GPU, DeviceQueue, gpu_device_nodes, probe_gpu

pytestmark = pytest.mark.skipif(gpu_device_nodes(), reason="this machine has an NVIDIA device")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_sessions_waiting_for_a_gpu_start_no_process_and_share_one_answer() -> None:
    probes: list[bool] = []

    def counted_probe() -> bool:  # the server's own probe, counted
        found = probe_gpu()
        probes.append(found)
        return found

    queue = DeviceQueue(poll_s=0.05, gpu_probe=counted_probe)  # polled up to 20 times a second
    waits: list[str] = []

    async def on_wait(reason: str) -> None:
        waits.append(reason)

    async def session(n: int) -> None:
        async with queue.acquire(GPU, f"session {n}: candidate #1", on_wait):
            raise AssertionError("no GPU here: the evaluation must keep waiting")

    async def main() -> float:
        before_cpu = children_cpu_s()
        tasks = [asyncio.create_task(session(n)) for n in range(3)]  # three waiting sessions
        deadline = time.monotonic() + 30
        while len(probes) < 20:  # twenty answers shared by the three waiting sessions
            assert time.monotonic() < deadline, f"only {len(probes)} probes in 30 s"
            await asyncio.sleep(0.01)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return children_cpu_s() - before_cpu

    spent = asyncio.run(main())
    # Each session told its reason once, with its place in line; the server knows there is no GPU.
    assert sorted(waits) == [NO_GPU.format(poll=0.05) + f" ({k} of 3 waiting)" for k in (1, 2, 3)]
    assert queue.gpu_state == "no-gpu"
    # No child process ran: importing torch alone costs seconds of CPU.
    assert spent < 0.05, f"waiting sessions spent {spent:.2f} s of CPU in child processes"


def test_the_queue_lists_who_waits_in_order_and_serves_them_in_that_order() -> None:
    queue = DeviceQueue(poll_s=0.05, gpu_probe=lambda: True)
    reasons: dict[str, list[str]] = {}
    order: list[str] = []

    async def session(name: str, gate: asyncio.Event | None = None) -> None:
        async def on_wait(reason: str) -> None:
            reasons.setdefault(name, []).append(reason)

        async with queue.acquire(GPU, name, on_wait):
            order.append(name)
            if gate is not None:
                await gate.wait()

    async def main() -> list[str]:
        gate = asyncio.Event()
        first = asyncio.create_task(session("a", gate))
        while queue.holders.get(GPU) != "a":
            await asyncio.sleep(0.01)
        rest = [asyncio.create_task(session(n)) for n in ("b", "c")]
        while len(queue.waiting[GPU]) < 2:
            await asyncio.sleep(0.01)
        seen = list(queue.waiting[GPU])
        gate.set()
        await asyncio.gather(first, *rest)
        return seen

    seen = asyncio.run(main())
    assert seen == ["b", "c"] and order == ["a", "b", "c"]
    # b found only the holder ahead of it; c found b waiting too.
    assert reasons == {"b": [GPU_BUSY], "c": [GPU_BUSY + " (2 of 2 waiting)"]}
    assert queue.waiting[GPU] == [] and queue.holders == {}
