"""A queued sink's counters on their own (exporters/tally.py)."""

from __future__ import annotations

from exporters.tally import SinkStats


def test_a_new_sinks_stats_show_its_name_and_nothing_counted():
    assert repr(SinkStats("otlp")) == (
        "SinkStats(name='otlp', exported=0, failed=0, dropped=0, retried=0, timed_out=0, "
        "queue_depth=0, last_latency_s=None, degraded=False, streak=0, failing_since=None)"
    )


def test_stats_compare_by_their_counters_only():
    stats = SinkStats("otlp")
    stats.add_failure("OSError")
    stats.add_success(0.5)  # ends the run of failures; what it raised is not a counter
    assert stats == SinkStats("otlp", exported=1, failed=1, last_latency_s=0.5)


def test_a_failure_counted_on_a_copy_is_not_the_live_stats():
    stats = SinkStats("otlp")
    stats.add_failure("OSError")
    copy = stats.copy(depth=0, degraded=True)
    copy.add_failure("TimeoutError")
    assert stats.add_failure("TimeoutError")  # new to the live run: worth its log line
    assert (stats.failed, copy.failed) == (2, 2)
