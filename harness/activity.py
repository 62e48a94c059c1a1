"""What the profiler and the default-stream fences saw around a candidate's calls, as plain
records: produced by harness/device.py, judged by harness/integrity.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamUse:
    """What the legacy and per-thread default streams did around one timed call, in ms relative to
    the call's start event: when the work queued there during the call ended, and by how much it
    outlived the call's own work on the harness stream (fence); or when what was queued there
    before the call's start finished (idle). None where not measured."""

    legacy_after_start: float | None = None
    per_thread_after_start: float | None = None
    legacy_after_call: float | None = None
    per_thread_after_call: float | None = None
    legacy_busy_at_start: float | None = None
    per_thread_busy_at_start: float | None = None


@dataclass(frozen=True)
class KernelActivity:
    """One kernel execution as the profiler recorded it."""

    name: str
    stream: int
    ms: float
    harness: bool  # a kernel of the harness itself (torch), not the candidate's
