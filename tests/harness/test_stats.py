"""The statistics of timing and reports (harness/stats.py), and the one rule of the geometric
mean: positive finite values only, None for none, anything else a ValueError that names it."""

from __future__ import annotations

import math

import pytest

from harness.stats import geomean, median, relative_spread


def test_median_odd_even_and_empty() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_geomean_of_speedups() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert geomean([3.0]) == pytest.approx(3.0)


def test_geomean_takes_any_iterable_once() -> None:
    assert geomean(v for v in (1.0, 10.0, 100.0)) == pytest.approx(10.0)


def test_geomean_of_no_values_is_none() -> None:
    assert geomean([]) is None
    assert geomean(v for v in ()) is None


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_geomean_refuses_a_value_that_is_not_positive_and_finite_and_names_it(bad: float) -> None:
    with pytest.raises(ValueError, match=rf"got {bad!r} \(value 1\)"):
        geomean([2.0, bad, 8.0])


def test_geomean_refuses_a_missing_value_the_caller_did_not_filter() -> None:
    with pytest.raises(ValueError, match=r"got None"):
        geomean([2.0, None])  # type: ignore[list-item]
    values: list[float | None] = [2.0, None, 8.0]
    assert geomean(v for v in values if v is not None) == pytest.approx(4.0)


def test_relative_spread() -> None:
    assert relative_spread([1.0]) == 0.0
    assert relative_spread([1.0] * 10) == 0.0
    assert relative_spread([1.0, 1.0, 1.0, 2.0]) > 0.5
