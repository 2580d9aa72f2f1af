"""Cumulative-to-window state: restarts are told by start time alone or count drop alone."""

from __future__ import annotations

import dataclasses

import pytest

from telemetry.otlp.temporality import HistogramState, histogram_window

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


def test_window_extremes_are_known_only_where_the_cumulative_extreme_moved():
    previous = point(100, 5, 10.0, (1, 2, 2), low=0.5, high=3.0)
    lower = histogram_window(previous, point(100, 6, 10.1, (2, 2, 2), 0.1, 3.0), 0)
    assert (lower.min, lower.max) == (0.1, None)  # a new minimum in this window
    higher = histogram_window(previous, point(100, 6, 19.0, (1, 2, 3), 0.5, 9.0), 0)
    assert (higher.min, higher.max) == (None, 9.0)
    same = histogram_window(previous, point(100, 6, 11.0, (1, 3, 2), 0.5, 3.0), 0)
    assert (same.min, same.max) == (None, None)  # equal extremes: not known to be here
    unknown = histogram_window(previous, point(100, 6, 11.0, (1, 3, 2)), 0)
    assert (unknown.min, unknown.max) == (None, None)
    first = histogram_window(
        point(100, 5, 10.0, (1, 2, 2)), point(100, 6, 11.0, (1, 3, 2), 1, 2), 0
    )
    assert (first.min, first.max) == (1, 2)  # no earlier extreme: this window's


def test_bucket_windows_need_the_same_bounds_and_growing_counts():
    previous = point(100, 5, 10.0, (1, 2, 2))
    for bounds in ((0.0, 2.0), (0.0, 0.5)):  # sorting after and before the previous bounds
        other_bounds = HistogramState(100, 8, 16.0, None, None, bounds, (2, 3, 3))
        window = histogram_window(previous, other_bounds, 0)
        assert (window.count, window.bounds, window.bucket_counts) == (3, (), ())
    for buckets in ((1, 2, 2, 3), (2, 3)):  # more or fewer buckets than before
        odd = HistogramState(100, 8, 16.0, None, None, BOUNDS, buckets)
        assert histogram_window(previous, odd, 0).bucket_counts == ()
    shrinking = histogram_window(previous, point(100, 8, 16.0, (0, 4, 4)), 0)
    assert (shrinking.count, shrinking.bucket_counts) == (3, ())  # a bucket went down
    no_buckets = HistogramState(100, 8, 16.0, None, None, BOUNDS, ())
    assert histogram_window(previous, no_buckets, 0).bucket_counts == ()
    unchanged = histogram_window(previous, point(100, 8, 16.0, (1, 2, 5)), 0)
    assert (unchanged.bounds, unchanged.bucket_counts) == (BOUNDS, (0, 0, 3))


def runtime_int(value: int) -> int:
    """``value`` as a new int object, as a decoder makes one per message (no shared constant)."""
    return int(str(value))


def test_realistic_start_times_decoded_per_message_are_the_same_series():
    start = 1_764_500_000_123_456_789  # epoch ns: far beyond CPython's small-int cache
    previous = point(runtime_int(start), 5, 10.0, (1, 2, 2))
    current = point(runtime_int(start), 8, 16.5, (1, 3, 4))
    window = histogram_window(previous, current, started_ns=0)
    assert (window.count, window.sum, window.bucket_counts) == (3, 6.5, (0, 1, 2))


def test_a_start_time_that_moved_back_with_a_growing_count_is_not_a_restart():
    # A restart starts later than the old start; an earlier start is the sender's clock
    # stepped back, and the count carries on: the window is the difference.
    previous = point(200, 5, 10.0, (1, 2, 2))
    current = point(150, 8, 16.5, (1, 3, 4))
    window = histogram_window(previous, current, started_ns=0)
    assert (window.count, window.sum, window.bucket_counts) == (3, 6.5, (0, 1, 2))


def test_the_first_point_of_a_series_started_at_one_ns_is_a_window():
    current = point(1, 3, 1.5)
    assert histogram_window(None, current, started_ns=0) == current
    assert histogram_window(None, current, started_ns=1) == current


def test_an_equal_count_is_an_empty_window_even_after_an_infinite_observation():
    previous = point(100, 5, float("inf"), (1, 2, 2), high=float("inf"))
    window = histogram_window(
        previous, point(100, 5, float("inf"), (1, 2, 2), high=float("inf")), 0
    )
    assert (window.count, window.sum, window.bucket_counts) == (0, 0.0, (0, 0, 0))
    assert (window.min, window.max) == (None, None)


def test_every_bucket_growing_and_more_than_256_buckets_keep_the_bucket_window():
    previous = point(100, 3, 3.0, (1, 1, 1))
    grown = histogram_window(previous, point(100, 6, 9.0, (2, 2, 2)), 0)
    assert grown.bucket_counts == (1, 1, 1)  # every bucket grew
    bounds = tuple(float(b) for b in range(299))  # 300 buckets
    before = HistogramState(100, 300, 0.0, None, None, bounds, (1,) * 300)
    after = HistogramState(100, 600, 0.0, None, None, bounds, (2,) * 300)
    wide = histogram_window(before, after, 0)
    assert (wide.bounds, wide.bucket_counts) == (bounds, (1,) * 300)


def test_an_unchanged_maximum_decoded_per_message_is_not_this_windows():
    high = 1234.5678
    previous = point(100, 5, 10.0, (1, 2, 2), low=float(str(0.25)), high=float(str(high)))
    current = point(100, 6, 11.0, (1, 3, 2), low=float(str(0.25)), high=float(str(high)))
    window = histogram_window(previous, current, 0)
    assert (window.min, window.max) == (None, None)


def test_states_are_immutable_values():
    state = point(100, 5, 10.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.count = 6
    assert hash(state) == hash(point(100, 5, 10.0))
