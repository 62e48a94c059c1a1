"""The timing loop (harness/timing.py) on the CPU backend's device: each implementation's
device hold follows its own host enqueue time, calls stay interleaved, and every timed call is
preceded by its preparation."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import harness.timing
from harness.device import CpuDevice
from harness.report import BLOCKING_FLAG_PREFIXES
from harness.timing import TimingSettings, lead_ms, reps_for, time_interleaved


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


class FakeClock:
    """The host clock `harness.timing` reads in the wall-clock tests: it moves only by the sleeps
    the test's device and candidate ask for, so a loaded machine cannot move a measurement (with
    real sleeps, a 1.6 ms synchronization took 2-5 ms now and then on a busy two-core machine, and
    one such call among the six re-measured ones flagged an honest call)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(harness.timing, "time", fake)
    return fake


class FixedTimerDevice(CpuDevice):
    """A device whose timer reads 0.01 ms per call: what the launches do beside the timed call
    (a sleep on the fake clock) shows in the wall clock only, as work hidden from the timed
    stream would."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.timing = False

    def time_call(self, fn: Callable[[], None]) -> Callable[[], float]:
        self.timing = True
        try:
            fn()
        finally:
            self.timing = False
        return lambda: 0.01


class SlowHostDevice(FixedTimerDevice):
    """A host slow at every synchronization (sync_ms each), the candidate's and a null call's
    alike: what the wall clock of an honest call read in a process that was slow all along."""

    def __init__(self, clock: FakeClock, sync_ms: float) -> None:
        super().__init__(clock)
        self.sync_ms = sync_ms
        self.null_calls = 0

    def synchronize(self) -> None:
        self.clock.sleep(self.sync_ms / 1e3)

    def null_call(self) -> None:
        self.null_calls += 1


def _wall_flags(clock: FakeClock, sleeps_ms: Callable[[int], float],
                sync_ms: float = 0.0) -> tuple[list[str], float]:
    """The candidate's flags and wall time when its n-th wall-clock call sleeps sleeps_ms(n)
    (and every synchronization of the host sync_ms), on the fake clock."""
    dev = SlowHostDevice(clock, sync_ms) if sync_ms else FixedTimerDevice(clock)
    untimed = [0]

    def candidate(i: int) -> None:
        if not dev.timing:
            clock.sleep(sleeps_ms(untimed[0]) / 1e3)
            untimed[0] += 1

    # No warm-up calls: every untimed call is one of the wall-clock cross-check's. The slack is
    # 1 ms, not the default 0.1 ms; the sleeps below are sized against it.
    settings = TimingSettings(min_reps=3, min_reps_slow=3, max_reps=3, wall_reps=3, warmup=0,
                              wall_slack_ms=1.0)
    t = time_interleaved(dev, {"candidate": candidate}, 1, settings)["candidate"]
    return t.flags, t.wall_ms_per_call


def test_one_slow_wall_clock_call_is_measured_again_and_not_flagged(clock: FakeClock) -> None:
    flags, wall = _wall_flags(clock, lambda n: 10.0 if n == 0 else 0.0)  # the host's hiccup, once
    assert wall < 1.0  # the clean re-measurement is what the report keeps
    # The report says the re-measurement happened, in a note that does not block the verdict.
    assert len(flags) == 1 and flags[0].startswith("re-measured wall clock: ")
    assert not flags[0].startswith(BLOCKING_FLAG_PREFIXES)
    assert "over 3 calls, then" in flags[0] and "over 6" in flags[0]
    assert _wall_flags(clock, lambda n: 0.0)[0] == []  # nothing slow: nothing measured again, no note


def test_a_host_slow_at_every_synchronization_is_told_from_hidden_work_by_a_null_call(clock: FakeClock) -> None:
    # Every synchronization costs the host 1.6 ms, over the 1 ms slack: the first measurement
    # is over the limit, the re-measurement's null calls read as slow, and nothing is flagged.
    flags, wall = _wall_flags(clock, lambda n: 0.0, sync_ms=1.6)
    assert wall > 1.5
    assert len(flags) == 1 and flags[0].startswith("re-measured wall clock: ")
    assert "each after a launch that does nothing (1." in flags[0] and "a slow host" in flags[0]
    # Work beside every call is still flagged on that host: the null call makes room for the
    # host's slowness beyond half the slack, not for the call's own time.
    flags, wall = _wall_flags(clock, lambda n: 5.0, sync_ms=1.6)
    assert len(flags) == 1 and flags[0].startswith("wall-clock") and "work runs outside the timed stream" in flags[0]
    assert "(a launch that does nothing: 1." in flags[0] and wall > 6.0


def test_the_null_calls_run_only_when_the_wall_clock_is_measured_again(clock: FakeClock) -> None:
    dev = SlowHostDevice(clock, 0.0)
    settings = TimingSettings(min_reps=3, min_reps_slow=3, max_reps=3, wall_reps=3, warmup=0, wall_slack_ms=1.0)
    time_interleaved(dev, {"candidate": lambda i: None}, 1, settings)
    assert dev.null_calls == 0  # under the limit: no second measurement, no control
    dev = SlowHostDevice(clock, 0.0)
    time_interleaved(dev, {"candidate": lambda i: clock.sleep(0.0 if dev.timing else 0.005)}, 1, settings)
    assert dev.null_calls == 6  # one before each of the 6 calls measured again


def test_work_outside_the_timed_stream_on_every_call_is_flagged(clock: FakeClock) -> None:
    flags, wall = _wall_flags(clock, lambda n: 5.0)
    assert len(flags) == 1 and flags[0].startswith("wall-clock") and wall > 4.5


def test_work_outside_the_timed_stream_on_every_third_call_is_flagged(clock: FakeClock) -> None:
    flags, _ = _wall_flags(clock, lambda n: 15.0 if n % 3 == 0 else 0.0)
    assert len(flags) == 1 and "work runs outside the timed stream" in flags[0]


class MarkedDevice(CpuDevice):
    """A device whose marker is reached when the test says so."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False

    def marker(self) -> Callable[[], bool]:
        return lambda: self.done


def test_busy_says_whether_the_queue_outlasts_a_given_time_until_the_device_is_done(clock: FakeClock) -> None:
    dev = MarkedDevice()
    busy = harness.timing.expected_busy(dev, since=0.0, queued_ms=200.0)  # 200 ms queued at t=0
    clock.now = 0.030
    assert busy(50.0) and busy(169.0) and not busy(171.0)
    clock.now = 0.160
    assert not busy(50.0) and busy(39.0)
    dev.done = True  # the device outpaced the estimate: nothing is left to hide behind
    assert not busy(1.0)


def test_the_meanwhile_hook_is_told_the_queue_the_timed_calls_hold(clock: FakeClock) -> None:
    """queued = every call after the first of each implementation, at its first call's time,
    plus the holds those calls were given: 0.01 ms calls, 25 of them each, led by 0.02 ms (the
    host took no time on the fake clock: the lead is its slack alone), the holds shrinking as
    the never-reached queue deepens (Ahead)."""

    class Queued(FixedTimerDevice):
        def __init__(self, clock: FakeClock) -> None:
            super().__init__(clock)
            self.holds: list[float] = []

        def hold(self, ms: float) -> None:
            self.holds.append(ms)

        def marker(self) -> Callable[[], bool]:
            return lambda: False

    told: list[bool] = []
    launches = {name: (lambda i: None) for name in ("a", "b")}
    settings = TimingSettings(budget_ms=1.0, min_reps=25, max_reps=25, warmup=1, wall_reps=1)
    assert lead_ms(0.0, settings) == pytest.approx(0.02)
    dev = Queued(clock)
    queued: list[float] = []

    def meanwhile(busy: harness.timing.Busy) -> None:
        queued.append(48 * 0.01 + sum(dev.holds[4:]))  # after the warm-up and first calls
        told.extend([busy(queued[0] - 0.001), busy(queued[0] + 0.001)])

    time_interleaved(dev, launches, 2, settings, cross_check=frozenset(), meanwhile=meanwhile)
    assert len(dev.holds) == 2 + 2 + 48
    assert told == [True, False]
    assert 0.48 < queued[0] < 0.48 + 48 * 0.02  # some holds were dropped, not all


class FloorDevice(CpuDevice):
    """A device whose flush takes at least `floor` ms and whose markers the test reaches."""

    def __init__(self, floor: float) -> None:
        super().__init__()
        self.floor = floor
        self.reached = 0  # marks with an index below this are reached
        self.made = 0

    def flush_floor_ms(self) -> float:
        return self.floor

    def marker(self) -> Callable[[], bool]:
        index = self.made
        self.made += 1
        return lambda: index < self.reached


def test_a_deep_queue_of_the_harness_s_own_work_drops_the_hold() -> None:
    dev = FloorDevice(0.01)
    ahead = harness.timing.Ahead(dev.flush_floor_ms())
    assert ahead.hold_for(0.05) == pytest.approx(0.05)  # nothing queued: the whole lead
    ahead.queued(0.05, dev.marker())  # call 0: flush 0.01 + half its 0.05 hold counted
    # The device has not reached call 0's end: only this call's flush is known to be ahead
    # (call 0's own flush and hold may be behind the device already).
    assert ahead.hold_for(0.05) == pytest.approx(0.04)
    ahead.queued(0.04, dev.marker())  # call 1: 0.01 + 0.02 counted
    assert ahead.hold_for(0.05) == pytest.approx(0.05 - (0.03 + 0.01))
    ahead.queued(0.01, dev.marker())  # call 2: 0.01 + 0.005
    assert ahead.hold_for(0.05) == pytest.approx(0.0)  # 0.03 + 0.015 + 0.01 ahead
    ahead.queued(0.0, dev.marker())
    dev.reached = 2  # the device passed calls 0 and 1: calls 3 and on count
    assert ahead.hold_for(0.05) == pytest.approx(0.05 - (0.01 + 0.01))
    dev.reached = 4  # past every call: the whole lead again
    assert ahead.hold_for(0.05) == pytest.approx(0.05)
    assert ahead.hold_for(0.0) == 0.0


def test_a_timed_call_s_own_length_never_counts_toward_the_hold() -> None:
    """A candidate's call may be as long as it likes on the device: the bound stays the
    harness's flushes and holds, so a peer after a long candidate call keeps its hold unless the
    harness's own work covers it."""
    dev = FloorDevice(0.0)
    ahead = harness.timing.Ahead(dev.flush_floor_ms())
    ahead.queued(0.5, dev.marker())  # a call held 0.5 ms: 0.25 counted once the device is past its end
    assert ahead.hold_for(0.2) == pytest.approx(0.2)
    ahead.queued(0.2, dev.marker())
    assert ahead.hold_for(0.2) == pytest.approx(0.1)  # only the second call's half hold ahead


def test_the_timing_loop_holds_less_behind_a_queue_the_device_has_not_reached() -> None:
    """The same implementations timed on a device that never reaches a mark (a deep queue) and
    on one that reaches each at once (the device keeps up: every hold whole)."""

    class Holds(FloorDevice):
        def __init__(self, floor: float, reached: bool) -> None:
            super().__init__(floor)
            self.holds: list[float] = []
            self.reached = 10**9 if reached else 0

        def hold(self, ms: float) -> None:
            self.holds.append(ms)

    settings = TimingSettings(min_reps=10, max_reps=10, warmup=1, wall_reps=1, lead_slack_ms=0.1)
    launches = {name: (lambda i: None) for name in ("a", "b")}
    deep, keeping_up = Holds(0.02, reached=False), Holds(0.02, reached=True)
    for dev in (deep, keeping_up):
        time_interleaved(dev, launches, 2, settings, cross_check=frozenset())
    main = slice(4, None)  # after the warm-up calls and the first timed calls
    assert all(h >= 0.1 for h in keeping_up.holds[main])
    assert sum(deep.holds[main]) < sum(keeping_up.holds[main]) / 2
    assert deep.holds[main][-1] == 0.0


# -- how many timed calls: 10 to 25 from the CLI, up to 50 in the server's re-times -----------


def test_timed_calls_per_implementation_are_10_to_25_in_a_5_ms_budget() -> None:
    s = TimingSettings()
    assert (s.budget_ms, s.min_reps, s.max_reps) == (5.0, 10, 25)
    assert reps_for(0.01, s) == 25  # a fast call: the cap, not 500
    assert reps_for(0.25, s) == 20
    assert reps_for(1.0, s) == 10  # the floor
    assert reps_for(8.0, s) == 3  # slow calls: fewer still
