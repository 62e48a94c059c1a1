"""Attribution by origin (issue 47, class 1): the profiler's cross-check counts as the candidate's
every kernel launched while the candidate's call runs, whatever its name; recorded profiler data
(synthetic event lists, as harness/device.py reduces torch.profiler's) stand in for the GPU."""

from __future__ import annotations

from harness.integrity import (
    CANDIDATE_RANGE,
    ProfiledEvent,
    attribute,
    profile_reason,
    summarize_activity,
)

HARNESS_STREAM, LEGACY = 7, 1


def call(t0: int, corr: int, name: str, stream: int = HARNESS_STREAM, ms: float = 1.0) -> list[ProfiledEvent]:
    """One candidate call: its range, the launch inside it, and the kernel that ran."""
    return [ProfiledEvent("range", CANDIDATE_RANGE, t0, t0 + 50_000),
            ProfiledEvent("launch", "cudaLaunchKernel", t0 + 10_000, t0 + 12_000, corr),
            ProfiledEvent("kernel", name, t0 + 100_000, t0 + 100_000 + int(ms * 1e6), corr, stream)]


def harness_fill(t0: int, corr: int) -> list[ProfiledEvent]:
    return [ProfiledEvent("launch", "cudaLaunchKernel", t0, t0 + 2_000, corr),
            ProfiledEvent("kernel", "void at::native::vectorized_elementwise_kernel<fill>", t0 + 5_000,
                          t0 + 25_000, corr, HARNESS_STREAM)]


def test_a_candidate_kernel_named_like_the_harness_is_still_the_candidates() -> None:
    events = [*harness_fill(0, 1), *call(1_000_000, 2, "socratic_harness::fresh_fill_kernel"),
              *harness_fill(3_000_000, 3), *call(4_000_000, 4, "void at::native::attention_kernel")]
    kernels = attribute(events)
    assert [k.harness for k in kernels] == [True, False, True, False]


def test_hidden_work_under_a_harness_name_on_another_stream_is_caught() -> None:
    """The issue's class 1 with class 2: real work after the call, on the legacy stream, named at::native."""
    events = []
    for i in range(3):
        events += harness_fill(i * 10_000_000, 10 * i + 1)
        events += call(i * 10_000_000 + 1_000_000, 10 * i + 2, "at::native::cheap_marker", ms=0.01)
        events += [ProfiledEvent("launch", "cudaLaunchKernel", i * 10_000_000 + 1_020_000,
                                 i * 10_000_000 + 1_021_000, 10 * i + 3),
                   ProfiledEvent("kernel", "at::native::real_attention", i * 10_000_000 + 2_000_000,
                                 i * 10_000_000 + 7_000_000, 10 * i + 3, LEGACY)]
    summary = summarize_activity(attribute(events), 3)
    assert summary.other_stream_kernels == 3
    why = profile_reason(summary, event_ms=0.01)
    assert why is not None and why.startswith("hidden work: the profiler saw 3 kernel(s)")


def test_a_kernel_whose_launch_the_profiler_did_not_record_is_judged_by_the_refused_names() -> None:
    """Seen on the GPU: some of the harness's own kernels arrive without a recorded launch. Those
    carrying a mark the static checks refuse in a candidate's source stay the harness's; any other
    kernel without a recorded launch is the candidate's."""
    marks = ("socratic_harness::", "at::native")
    events = [*call(0, 2, "attention_fwd"),
              ProfiledEvent("kernel", "socratic_harness::fresh_fill", 0, 1_000_000, 99, HARNESS_STREAM),
              ProfiledEvent("kernel", "mystery_kernel", 0, 1_000_000, 0, HARNESS_STREAM)]
    assert [k.harness for k in attribute(events, marks)] == [False, True, False]
    # A recorded launch inside the candidate's call decides over any name.
    named = [*call(0, 3, "socratic_harness::fresh_fill")]
    assert [k.harness for k in attribute(named, marks)] == [False]


def test_the_harness_own_kernels_outside_the_candidates_calls_stay_the_harness() -> None:
    events = [*harness_fill(0, 1), *call(1_000_000, 2, "attention_fwd", ms=0.5)]
    summary = summarize_activity(attribute(events), 1)
    assert summary.kernels == 1 and summary.other_stream_kernels == 0
    assert profile_reason(summary, event_ms=0.5) is None


def test_without_any_recorded_launch_the_names_the_static_checks_refuse_are_the_fallback() -> None:
    """A profiler build that records no runtime events: every kernel would be the candidate's and
    an honest kernel would carry the harness's fills; the harness's marks decide then, and the
    static checks keep them out of a candidate's source."""
    kernels = attribute([ProfiledEvent("kernel", "void at::native::fill", 0, 10, 1, HARNESS_STREAM),
                         ProfiledEvent("kernel", "attention_fwd", 20, 30, 2, HARNESS_STREAM)],
                        fallback_marks=("at::native",))
    assert [k.harness for k in kernels] == [True, False]
