"""Cumulative-to-window state: restarts are told by start time alone or count drop alone."""

from __future__ import annotations

from collector.temporality import HistogramState, histogram_window

BOUNDS = (0.0, 1.0)


def point(start: int, count: int, total: float, buckets=(0, 0, 0), low=None, high=None):
    return HistogramState(start, count, total, low, high, BOUNDS, buckets)


def test_a_later_start_time_alone_is_a_restart():
    previous = point(100, 5, 10.0, (1, 2, 2))
    current = point(101, 9, 30.0, (2, 3, 4))  # the count still grew
    assert histogram_window(previous, current, started_ns=0) == current


def test_a_count_drop_alone_is_a_restart():
    previous = point(100, 5, 10.0, (1, 2, 2))
    current = point(100, 4, 3.0, (1, 1, 2))  # same start time
    assert histogram_window(previous, current, started_ns=0) == current


def test_same_start_and_growing_count_is_a_window_of_the_difference():
    previous = point(100, 5, 10.0, (1, 2, 2))
    current = point(100, 8, 16.5, (1, 3, 4))
    window = histogram_window(previous, current, started_ns=0)
    assert (window.count, window.sum, window.bucket_counts) == (3, 6.5, (0, 1, 2))
    assert window.start_time_unix_nano == 100


def test_an_equal_count_is_an_empty_window():
    previous = point(100, 5, 10.0, (1, 2, 2))
    window = histogram_window(previous, point(100, 5, 10.0, (1, 2, 2)), started_ns=0)
    assert (window.count, window.sum, window.bucket_counts) == (0, 0.0, (0, 0, 0))


def test_first_point_is_a_window_from_the_collector_start_on_and_a_baseline_before():
    current = point(1000, 3, 1.5)
    assert histogram_window(None, current, started_ns=1000) == current  # at the boundary
    assert histogram_window(None, current, started_ns=1001) is None  # older: baseline only
    assert histogram_window(None, point(0, 3, 1.5), started_ns=0) is None  # no start time
