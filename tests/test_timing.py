"""The timing loop (harness/timing.py) on the CPU backend's device: each implementation's
device hold follows its own host enqueue time, calls stay interleaved, and every timed call is
preceded by its preparation."""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.device import CpuDevice
from harness.timing import TimingSettings, lead_ms, time_interleaved


class RecordingDevice(CpuDevice):
    """The CPU device, keeping the order of holds and timed calls."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, float]] = []

    def hold(self, ms: float) -> None:
        self.events.append(("hold", ms))

    def time_call(self, fn: Callable[[], None]) -> Callable[[], float]:
        self.events.append(("call", 0.0))
        return super().time_call(fn)


SETTINGS = TimingSettings(budget_ms=5.0, min_reps=4, min_reps_slow=4, max_reps=4, wall_reps=1,
                          max_lead_ms=100.0)


def test_each_implementation_is_held_for_its_own_host_time() -> None:
    dev = RecordingDevice()
    order: list[str] = []

    def slow_host(i: int) -> None:  # a call whose enqueue costs the host 4 ms
        order.append("slow")
        time.sleep(0.004)

    def fast_host(i: int) -> None:
        order.append("fast")

    timed = time_interleaved(dev, {"slow": slow_host, "fast": fast_host}, 2, SETTINGS,
                             cross_check=frozenset())
    assert set(timed) == {"slow", "fast"} and all(t.reps == 4 for t in timed.values())
    # The hold before a call is the last "hold" event before that call's "call" event.
    holds: dict[str, list[float]] = {"slow": [], "fast": []}
    last_hold = 0.0
    calls = iter(order[4:])  # after the two warm-up calls of each
    for kind, ms in dev.events:
        if kind == "hold":
            last_hold = ms
        else:
            holds[next(calls)].append(last_hold)
    slow, fast = holds["slow"], holds["fast"]
    assert len(slow) == len(fast) == 4
    assert all(h >= lead_ms(4.0, SETTINGS) for h in slow)
    assert all(h < lead_ms(1.0, SETTINGS) for h in fast)  # not the slow one's hold
    # Interleaved: A B, then B A, ...
    assert order[4:8] == ["slow", "fast", "fast", "slow"]


def test_the_lead_is_capped_and_has_a_floor() -> None:
    s = TimingSettings()
    assert lead_ms(0.0, s) == s.lead_slack_ms
    assert lead_ms(0.1, s) == 2 * 0.1 + s.lead_slack_ms
    assert lead_ms(10.0, s) == s.max_lead_ms
