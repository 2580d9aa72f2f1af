"""FailureRun: which starts and ends of a run of failures are logged, and the counts they carry."""

from __future__ import annotations

from exporters.otlp.failure_run import FailureRun, FailureRunEnd


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_run_is_logged_at_its_start_and_end_with_its_counts():
    run = FailureRun(quiet_s=60.0, clock=Clock())
    assert run.succeeded() is None  # no run yet
    assert [run.failed(3) for _ in range(4)] == [True, False, False, False]
    assert run.failing
    assert run.succeeded() == FailureRunEnd(4, 12, 1)
    assert not run.failing and run.succeeded() is None


def test_flapping_within_the_quiet_period_is_counted_into_the_next_logged_end():
    clock = Clock()
    run = FailureRun(quiet_s=60.0, clock=clock)
    assert run.failed(1) and run.succeeded() == FailureRunEnd(1, 1, 1)
    for _ in range(5):  # five flaps, each shorter than the quiet period, within it
        clock.now += 1.0
        assert not run.failed(2) and not run.failed(2)
        assert run.succeeded() is None
    clock.now += 54.999  # 59.999 s after the logged end: still quiet
    assert not run.failed(1)
    clock.now += 59.999  # this run has not lasted the quiet period yet
    assert not run.failed(1)
    clock.now += 0.001  # now it has: its start is logged, late
    assert run.failed(1)
    end = run.succeeded()
    assert end == FailureRunEnd(5 * 2 + 3, 5 * 4 + 3, 6) and end.over() == " over 6 runs"
    clock.now += 60.0  # a full quiet period after the last logged end: logged at once
    assert run.failed(1)
    assert run.succeeded().over() == ""
