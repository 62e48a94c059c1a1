"""The statistics of timing and reports (harness/stats.py), and the one rule of the geometric
mean: positive finite values only, None for none, anything else a ValueError that names it."""

from __future__ import annotations

import math

import pytest

from harness.stats import geomean, geomean_interval, median, relative_spread, t975


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


def test_geomean_interval_is_student_t_on_the_logs() -> None:
    # logs 0 and 2: mean 1, sd sqrt(2), half-width t(1) * sqrt(2) / sqrt(2) = 12.706
    low, high = geomean_interval([1.0, math.exp(2.0)])
    assert math.log(low) == pytest.approx(1.0 - 12.706)
    assert math.log(high) == pytest.approx(1.0 + 12.706)
    # ten values: t(9) = 2.262; the interval is symmetric around the geomean in logs
    values = [1.0, 1.1, 0.9, 1.2, 1.0, 1.05, 0.95, 1.3, 1.0, 1.1]
    low, high = geomean_interval(values)
    mean = geomean(values)
    assert mean is not None and low < mean < high
    assert math.log(mean) - math.log(low) == pytest.approx(math.log(high) - math.log(mean))
    logs = [math.log(v) for v in values]
    mu = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mu) ** 2 for x in logs) / 9)
    assert math.log(high) - mu == pytest.approx(2.262 * sd / math.sqrt(10))


def test_geomean_interval_needs_two_values_and_narrows_with_more() -> None:
    assert geomean_interval([]) is None
    assert geomean_interval([1.2]) is None  # one use says nothing about its spread
    assert geomean_interval([1.1, 1.1]) == pytest.approx((1.1, 1.1))  # no spread, no width
    few = geomean_interval([1.0, 1.2])
    many = geomean_interval([1.0, 1.2] * 10)
    assert few is not None and many is not None
    assert many[1] - many[0] < few[1] - few[0]
    with pytest.raises(ValueError, match="positive finite"):
        geomean_interval([1.0, 0.0])


def test_t975_matches_the_table_and_its_tail() -> None:
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert t975(60) == pytest.approx(2.000, abs=0.003)
    assert t975(120) == pytest.approx(1.980, abs=0.003)
    with pytest.raises(ValueError):
        t975(0)
