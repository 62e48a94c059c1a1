"""Checks against reward hacks in the timed phase (verifier rules 4-5; docs/verifier.md lists
each hack class, the check that catches it and its reason text): work hidden from the timed
stream (device-synchronized tail and profiler) and persisting L2. Each function decides from
measurements and returns the reason a person reads, or None. The checks of the timed outputs
on fresh inputs are the problem's (harness/attention/fresh.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.activity import KernelActivity, StreamUse
from harness.stats import median

# Device-synchronized tail: the device may stay busy this long after the harness stream has
# finished a call before it counts as hidden work (synchronization itself costs microseconds).
TAIL_MIN_MS = 0.1
TAIL_FRACTION = 0.25
TAIL_CALLS = 3
# A tail over the threshold is measured again on this many calls before it fails the kernel: work
# hidden on another stream shows on every call, a slow device-wide synchronization does not (one
# honest kernel read 0.8 ms on 2 of 3 calls once in ~24,000 scenario runs on the H200, stop 30).
TAIL_RECHECK_CALLS = 6
# Profiler: the candidate's kernels may take this factor (plus slack) longer than the events
# on the harness stream measured before it counts as hidden work.
PROFILE_FACTOR = 1.5
PROFILE_SLACK_MS = 0.05
PROFILE_CALLS = 3
# A win this large gets the profiler cross-check (once per process; flagged scenarios always):
# over the baseline (a CUDA-core kernel that FA3-class kernels beat by 20-30x), or over the
# fastest peer (torch SDPA's cuDNN and flash backends).
SUSPICIOUS_VS_BASELINE = 30.0
SUSPICIOUS_VS_PEER = 2.0


def tail_reason(samples: Sequence[tuple[float, float]]) -> str | None:
    """samples: (ms until the harness stream finished, ms the device stayed busy after)."""
    if not samples:
        return None
    stream_ms = median([s for s, _ in samples])
    tail_ms = median([t for _, t in samples])
    if tail_ms > max(TAIL_MIN_MS, TAIL_FRACTION * stream_ms):
        return (
            f"hidden work: the device stayed busy {tail_ms:.3f} ms after the harness stream had "
            f"finished the call ({stream_ms:.3f} ms): the kernel runs work on another stream or "
            "a host thread, which the harness's timers do not see"
        )
    return None


def tail_recheck_note(first: Sequence[tuple[float, float]], again: Sequence[tuple[float, float]]) -> str:
    """The informational flag of a tail that cleared when measured again (docs/verifier.md)."""
    return (
        f"re-measured device tail: {median([t for _, t in first]):.3f} ms after the harness stream on "
        f"{len(first)} call(s), {median([t for _, t in again]):.3f} ms on {len(again)} more"
    )


@dataclass(frozen=True)
class ActivitySummary:
    kernels: int
    kernel_ms_per_call: float
    streams: tuple[int, ...]
    other_stream_kernels: int
    other_stream_ms_per_call: float


def summarize_activity(
    activity: Sequence[KernelActivity], calls: int
) -> ActivitySummary:
    """The candidate's kernels, per call; the harness stream is the one torch's own kernels
    (the poison fills before each call) ran on."""
    harness_streams = {a.stream for a in activity if a.harness}
    mine = [a for a in activity if not a.harness]
    streams = tuple(sorted({a.stream for a in mine}))
    if harness_streams:
        other = [a for a in mine if a.stream not in harness_streams]
    else:  # no marker seen: more than one stream is already suspicious
        other = mine if len(streams) > 1 else []
    n = max(1, calls)
    return ActivitySummary(
        kernels=len(mine),
        kernel_ms_per_call=sum(a.ms for a in mine) / n,
        streams=streams,
        other_stream_kernels=len(other),
        other_stream_ms_per_call=sum(a.ms for a in other) / n,
    )


def profile_reason(summary: ActivitySummary, event_ms: float) -> str | None:
    if summary.other_stream_kernels:
        return (
            f"hidden work: the profiler saw {summary.other_stream_kernels} kernel(s) "
            f"({summary.other_stream_ms_per_call:.3f} ms per call) on another stream than the "
            "one the harness passed; the harness's events do not time them"
        )
    if summary.kernel_ms_per_call > PROFILE_FACTOR * event_ms + PROFILE_SLACK_MS:
        return (
            f"hidden work: the profiler saw {summary.kernel_ms_per_call:.3f} ms of the kernel's "
            f"kernels per call but the harness stream's events measured {event_ms:.3f} ms"
        )
    return None


def persisting_l2_reason(limit_bytes: int, when: str) -> str | None:
    if limit_bytes > 0:
        return (
            f"persisting L2: {limit_bytes} bytes of L2 were set aside for persisting accesses "
            f"{when}; lines kept there survive the harness's cache flush and make repeated "
            "calls look faster than a first call"
        )
    return None


ROOFLINE_MARK = "under the roofline floor"
BASELINE_MARK = "over the baseline"


def reverified_flags(flags: Sequence[str]) -> list[str]:
    """Verifier rule 5's re-verification of a 100x-over-baseline flag, once the profiler has
    confirmed that the kernel's own durations match the timer: the speed is real unless the
    roofline says otherwise. A naive baseline can legitimately lose 100x (a decode shape it
    runs on a few dozen CTAs), so the flag becomes a note; a roofline flag, or a 100x flag
    beside one, stays and keeps blocking."""
    if any(ROOFLINE_MARK in f for f in flags):
        return list(flags)
    out = []
    for f in flags:
        if f.startswith("impossible:") and BASELINE_MARK in f:
            detail = f.removeprefix("impossible:").strip()
            f = (f"re-verified: {detail} held: the profiler's kernel durations match the "
                 "timer and the time is above the roofline floor")
        out.append(f)
    return out


# -- attribution by origin (issue 47, class 1) -------------------------------------------------------

# The profiler range the worker opens around each of the candidate's calls while profiling
# (ScenarioEvaluator._call): every kernel launched inside one is the candidate's, whatever its name.
CANDIDATE_RANGE = "socratic.candidate_call"


@dataclass(frozen=True)
class ProfiledEvent:
    """One record of the profiler, reduced to what attribution needs. kind: "range" (a host range:
    the candidate's call), "launch" (a host API call that launches work: cudaLaunchKernel,
    cuLaunchKernelEx, ...), or "kernel" (a kernel's execution on the device)."""

    kind: str
    name: str
    start_ns: int
    end_ns: int
    correlation: int = 0
    stream: int = 0


def attribute(events: Sequence[ProfiledEvent], fallback_marks: Sequence[str] = ()) -> list[KernelActivity]:
    """Each kernel by origin: launched inside a candidate range (matched by correlation id), it is
    the candidate's whatever its name (a kernel named `socratic_harness::fill` by a candidate is
    still the candidate's); launched outside every range, the harness's. A kernel whose launch the
    profiler did not record is judged by name, `fallback_marks`, which the static checks refuse in
    a candidate's source: on the H200 and H100 some of the harness's own kernels arrived without a
    recorded launch, and counting them as the candidate's rejected the gallery leader as hidden
    work. Where the profiler recorded no launch at all, every kernel is judged by name."""
    if not any(e.kind == "launch" for e in events):
        return [KernelActivity(name=e.name, stream=e.stream, ms=(e.end_ns - e.start_ns) / 1e6,
                               harness=any(m in e.name for m in fallback_marks))
                for e in events if e.kind == "kernel"]
    ranges = [(e.start_ns, e.end_ns) for e in events if e.kind == "range" and e.name == CANDIDATE_RANGE]
    launches = {e.correlation: e for e in events if e.kind == "launch" and e.correlation}
    inside = {c for c, e in launches.items() if any(a <= e.start_ns <= b for a, b in ranges)}

    def harness(e: ProfiledEvent) -> bool:
        if e.correlation in launches:
            return e.correlation not in inside
        return any(m in e.name for m in fallback_marks)

    return [KernelActivity(name=e.name, stream=e.stream, ms=(e.end_ns - e.start_ns) / 1e6, harness=harness(e))
            for e in events if e.kind == "kernel"]


# -- the default streams (issue 47, classes 3 and 5) -------------------------------------------------

# A default stream is busy in a call when its fence event passed this long after the call's start
# (a wait that resolves at once passes within microseconds), and outlives the call when it passed
# this long after the call's own end on the harness stream.
# Honest kernels read 0.020-0.022 ms here on an H100 (the fence's own enqueue latency), so the slack
# is well above it; work a kernel does there inside its call is fenced into its time anyway.
DEFAULT_STREAM_SLACK_MS = 0.15
OUTLIVED_SLACK_MS = 0.005


def default_stream_reason(uses: Sequence[StreamUse]) -> str | None:
    """The candidate's timed calls: work it put on a default stream (launch only on the stream the
    harness passes). Decided on the median call, so one slow wait is not a verdict."""
    for label, start, end in (("legacy", "legacy_after_start", "legacy_after_call"),
                              ("per-thread", "per_thread_after_start", "per_thread_after_call")):
        after_start = [getattr(u, start) for u in uses if getattr(u, start) is not None]
        after_call = [getattr(u, end) for u in uses if getattr(u, end) is not None]
        if not after_start or median(after_start) <= DEFAULT_STREAM_SLACK_MS:
            continue
        outlived = median(after_call) if after_call else 0.0
        if outlived > OUTLIVED_SLACK_MS:
            return (f"default stream: work the kernel put on the {label} default stream ran "
                    f"{outlived:.3f} ms past the end of its call on the harness stream (median of "
                    f"{len(after_call)} timed calls): work that would run beside the harness's next calls "
                    "(peer sabotage) or before the next call's start event; the harness fences both "
                    "default streams into the kernel's calls and counts that work as its time")
        return (f"default stream: the kernel ran {median(after_start):.3f} ms of work on the {label} "
                "default stream during its calls (median of "
                f"{len(after_start)}): launch only on the stream the harness passes")
    return None


def sabotage_reason(name: str, uses: Sequence[StreamUse]) -> str | None:
    """A baseline or peer call that started while work was still queued on a default stream, or
    whose fence found work there during the call: only the candidate puts work there (the peers and
    the baseline run on the harness stream), and it would be timed as theirs."""
    checks = ((OUTLIVED_SLACK_MS, "busy_at_start", "the kernel's work on the {label} default stream was still "
               "running {ms:.3f} ms into the timed calls of {name} (median of {n}): it shares the device with "
               "what the harness times next and makes {name} read slower"),
              (DEFAULT_STREAM_SLACK_MS, "after_start", "work on the {label} default stream ran {ms:.3f} ms into "
               "the timed calls of {name} (median of {n}), which put nothing there: the fence counts it as "
               "{name}'s time and makes {name} read slower"))
    for slack, suffix, words in checks:
        for label, prefix in (("legacy", "legacy"), ("per-thread", "per_thread")):
            seen = [getattr(u, f"{prefix}_{suffix}") for u in uses if getattr(u, f"{prefix}_{suffix}") is not None]
            if seen and median(seen) > slack:
                return "sabotage: " + words.format(label=label, ms=median(seen), name=name, n=len(seen))
    return None
