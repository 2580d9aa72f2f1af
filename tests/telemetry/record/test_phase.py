"""The phase stack record_timing keeps for the heartbeat: nesting, idle, listeners."""

from __future__ import annotations

import threading

import pytest

from telemetry import stats_tracker
from telemetry.record import phase
from telemetry.record.tracker import DistributedStatsTracker


@pytest.mark.parametrize("tracker", [stats_tracker.get("phase_test"), DistributedStatsTracker()])
def test_record_timing_reports_the_innermost_open_scope(tracker):
    assert phase.current()[0] == phase.IDLE
    with tracker.record_timing("rollout"):
        outer, outer_start = phase.current()
        assert outer == "rollout"
        with tracker.record_timing("ppo_actor/update"):
            inner, inner_start = phase.current()
            assert inner == "ppo_actor/update" and inner_start >= outer_start
        assert phase.current() == ("rollout", outer_start)
    name, since = phase.current()
    assert name == phase.IDLE and since == phase.last_change() >= inner_start


def test_a_scope_that_raises_still_closes():
    tracker = DistributedStatsTracker()
    with pytest.raises(KeyError), tracker.record_timing("load"):
        raise KeyError("boom")
    assert phase.current()[0] == phase.IDLE


def test_scopes_of_two_threads_interleave():
    first_open, second_done = threading.Event(), threading.Event()
    tracker = DistributedStatsTracker()

    def other() -> None:
        with tracker.record_timing("generate"):
            first_open.set()
            assert second_done.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    assert first_open.wait(30)
    with tracker.record_timing("train"):
        assert phase.current()[0] == "train"
    assert phase.current()[0] == "generate"  # the other thread's scope is still open
    second_done.set()
    thread.join(30)
    assert phase.current()[0] == phase.IDLE


def test_listeners_see_entry_and_exit_until_removed():
    seen: list[tuple[str, bool]] = []
    listener = lambda name, entering: seen.append((name, entering))  # noqa: E731
    phase.add_listener(listener)
    phase.add_listener(listener)
    try:
        with DistributedStatsTracker().record_timing("step"):
            pass
    finally:
        phase.remove_listener(listener)
    with DistributedStatsTracker().record_timing("step"):
        pass
    assert seen == [("step", True), ("step", False)]
