"""Streak: which starts and ends of a run of failures are logged, and the counts they carry."""

from __future__ import annotations

from exporters.otlp.streak import Streak, StreakEnd


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_run_is_logged_at_its_start_and_end_with_its_counts():
    streak = Streak(quiet_s=60.0, clock=Clock())
    assert streak.succeeded() is None  # no run yet
    assert [streak.failed(3) for _ in range(4)] == [True, False, False, False]
    assert streak.failing
    assert streak.succeeded() == StreakEnd(4, 12, 1)
    assert not streak.failing and streak.succeeded() is None


def test_flapping_within_the_quiet_period_is_counted_into_the_next_logged_end():
    clock = Clock()
    streak = Streak(quiet_s=60.0, clock=clock)
    assert streak.failed(1) and streak.succeeded() == StreakEnd(1, 1, 1)
    for _ in range(5):  # five flaps, each shorter than the quiet period, within it
        clock.now += 1.0
        assert not streak.failed(2) and not streak.failed(2)
        assert streak.succeeded() is None
    clock.now += 54.999  # 59.999 s after the logged end: still quiet
    assert not streak.failed(1)
    clock.now += 59.999  # this run has not lasted the quiet period yet
    assert not streak.failed(1)
    clock.now += 0.001  # now it has: its start is logged, late
    assert streak.failed(1)
    end = streak.succeeded()
    assert end == StreakEnd(5 * 2 + 3, 5 * 4 + 3, 6) and end.over() == " over 6 runs"
    clock.now += 60.0  # a full quiet period after the last logged end: logged at once
    assert streak.failed(1)
    assert streak.succeeded().over() == ""
