"""Small statistics used by timing and reports: median, geometric mean, spread."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (mean of the two middle values for even lengths)."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean, the project's one rule for it (reports, judges, tables, evidence).

    Every value must be positive and finite (a speedup, a time, a rate, a gain); None when
    there are none. A value <= 0, NaN, infinite or None raises ValueError naming it: such a
    value is a bug upstream, and dropping it would move the mean without a trace. Callers whose
    values may be missing (a peer that did not run, a scenario that failed) filter them out
    themselves, where the reader sees it.
    """
    logs = []
    for i, v in enumerate(values):
        if v is None or not (v > 0 and math.isfinite(v)):
            raise ValueError(f"geomean needs positive finite values, got {v!r} (value {i})")
        logs.append(math.log(v))
    if not logs:
        return None
    return math.exp(sum(logs) / len(logs))


def relative_spread(values: Sequence[float]) -> float:
    """(p90 - p10) / median: how noisy a set of timings is (0 for a single value)."""
    if len(values) < 2:
        return 0.0
    ordered = sorted(values)
    lo = ordered[int(0.1 * (len(ordered) - 1))]
    hi = ordered[math.ceil(0.9 * (len(ordered) - 1))]
    mid = median(ordered)
    return (hi - lo) / mid if mid > 0 else 0.0
