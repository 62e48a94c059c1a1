"""The default streams are each call's own time (issue 47, classes 3 and 5): the timing loop fences
the legacy and per-thread default streams into every timed call (the fence's cost is in every
implementation's time, so the ratios stay symmetric) and checks them idle at the start of every
baseline and peer call; the worker fails a candidate whose default-stream work
outlives its calls, or is still running when the harness times something else, and keeps each timed
output the moment its call ends. The GPU's events are stood in for by recorded values."""

from __future__ import annotations

from collections.abc import Callable

from harness.activity import StreamUse
from harness.device import CpuDevice
from harness.integrity import default_stream_reason, sabotage_reason
from harness.timing import FENCE_LEAD_MS, TimingSettings, lead_ms, stream_guards, time_interleaved

SETTINGS = TimingSettings(budget_ms=5.0, min_reps=4, min_reps_slow=4, max_reps=4, wall_reps=1,
                          max_lead_ms=100.0)


class GuardedDevice(CpuDevice):
    """The CPU device, answering time_call_guarded with recorded default-stream measurements and
    keeping the order of what the loop asked for."""

    def __init__(self, use: StreamUse) -> None:
        super().__init__()
        self.use = use
        self.log: list[str] = []
        self.holds: list[float] = []

    def hold(self, ms: float) -> None:
        self.holds.append(ms)

    def time_call_guarded(self, fn: Callable[[], None], fence: bool, idle: bool
                          ) -> tuple[Callable[[], float], Callable[[], StreamUse] | None]:
        self.log.append(f"start fence={fence} idle={idle}")
        read = self.time_call(fn)
        self.log.append("end")
        return read, ((lambda: self.use) if fence or idle else None)


def test_the_candidate_is_fenced_the_others_checked_idle_and_its_output_kept_before_any_other_call() -> None:
    dev = GuardedDevice(StreamUse())
    calls: list[str] = []
    timed = time_interleaved(
        dev, {"candidate": lambda i: calls.append("candidate"), "baseline": lambda i: calls.append("baseline")},
        2, SETTINGS, cross_check=frozenset(), after={"candidate": lambda i: dev.log.append("kept")},
        fenced=frozenset({"candidate"}), idle_before=frozenset({"baseline"}))
    assert len(timed["candidate"].streams) == 4 and len(timed["baseline"].streams) == 4
    timed_log = [x for x in dev.log if x.startswith("start") or x in ("end", "kept")]
    for i, entry in enumerate(timed_log):
        if entry == "start fence=True idle=False":  # a candidate call: its end, then its output kept
            assert timed_log[i + 1:i + 3] == ["end", "kept"]
        else:
            assert entry in ("end", "kept", "start fence=False idle=True")


def test_a_fenced_call_is_held_long_enough_for_the_fences_host_work() -> None:
    assert lead_ms(0.01 + FENCE_LEAD_MS, SETTINGS) > lead_ms(0.01, SETTINGS)


def test_work_left_on_the_legacy_stream_past_the_call_fails_naming_the_stream_and_sabotage() -> None:
    """cheat_peer_sabotage.cu: a spinner on the legacy default stream after each call."""
    uses = [StreamUse(legacy_after_start=1.06, per_thread_after_start=0.001, legacy_after_call=0.06,
                      per_thread_after_call=-1.0)] * 10
    why = default_stream_reason(uses)
    assert why is not None and "the legacy default stream" in why and "peer sabotage" in why


def test_work_on_the_per_thread_stream_before_the_next_start_fails_naming_it() -> None:
    """cheat_early_start.cu: a waiter on the per-thread default stream after each call."""
    uses = [StreamUse(legacy_after_start=0.002, per_thread_after_start=0.9, legacy_after_call=-0.8,
                      per_thread_after_call=0.06)] * 10
    why = default_stream_reason(uses)
    assert why is not None and "the per-thread default stream" in why and "start event" in why


def test_work_inside_the_call_on_a_default_stream_fails_too() -> None:
    uses = [StreamUse(legacy_after_start=0.5, per_thread_after_start=0.0, legacy_after_call=-0.1,
                      per_thread_after_call=-0.6)] * 5
    why = default_stream_reason(uses)
    assert why is not None and why.startswith("default stream: the kernel ran 0.500 ms of work on the legacy")


def test_an_honest_kernel_whose_default_streams_stay_empty_passes_even_with_one_slow_wait() -> None:
    quiet = StreamUse(legacy_after_start=0.003, per_thread_after_start=0.002, legacy_after_call=-0.5,
                      per_thread_after_call=-0.5)
    slow = StreamUse(legacy_after_start=0.6, per_thread_after_start=0.002, legacy_after_call=0.1,
                     per_thread_after_call=-0.5)
    assert default_stream_reason([quiet] * 9 + [slow]) is None


def test_a_peer_started_while_candidate_work_still_ran_on_a_default_stream_is_sabotage() -> None:
    busy = [StreamUse(legacy_busy_at_start=0.4)] * 6
    why = sabotage_reason("cudnn", busy)
    assert why is not None and why.startswith("sabotage: ") and "cudnn" in why
    assert sabotage_reason("cudnn", [StreamUse(legacy_busy_at_start=-0.2, per_thread_busy_at_start=-0.2)] * 6) is None


def test_every_call_is_fenced_and_every_call_but_the_candidates_checked_idle() -> None:
    """The fence costs each call the same few microseconds: were it in the candidate's calls only,
    every ratio to a peer would read low (on an H100, x FA3 0.964 for a kernel at 1.00)."""
    fenced, idle = stream_guards(["candidate", "baseline", "fa3", "cudnn"])
    assert fenced == {"candidate", "baseline", "fa3", "cudnn"}
    assert idle == {"baseline", "fa3", "cudnn"}
    dev = GuardedDevice(StreamUse())
    time_interleaved(dev, {"candidate": lambda i: None, "fa3": lambda i: None}, 2, SETTINGS,
                     cross_check=frozenset(), fenced=fenced & {"candidate", "fa3"},
                     idle_before=idle & {"candidate", "fa3"})
    starts = [x for x in dev.log if x.startswith("start")]
    assert set(starts) == {"start fence=True idle=False", "start fence=True idle=True"}
    assert starts.count("start fence=True idle=True") == starts.count("start fence=True idle=False")


def test_work_on_a_default_stream_during_a_peers_fenced_call_is_sabotage() -> None:
    """The peers and the baseline run on the harness stream: default-stream work their fence finds
    during their calls was queued by the candidate (a thread, a callback) and is timed as theirs."""
    during = [StreamUse(legacy_after_start=0.02, per_thread_after_start=0.5, legacy_after_call=-0.3,
                        per_thread_after_call=0.2, legacy_busy_at_start=-0.1, per_thread_busy_at_start=-0.1)] * 6
    why = sabotage_reason("fa3", during)
    assert why is not None and "per-thread default stream" in why and "timed calls of fa3" in why
    honest = StreamUse(legacy_after_start=0.021, per_thread_after_start=0.02, legacy_after_call=-0.4,
                       per_thread_after_call=-0.4, legacy_busy_at_start=-0.1, per_thread_busy_at_start=-0.1)
    assert sabotage_reason("fa3", [honest] * 6) is None
