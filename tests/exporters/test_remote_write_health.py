"""The remote-write link's counters, state and log lines (exporters.remote_write.health), on
a clock the test moves."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from exporters.remote_write.health import DOWN, DROP_REASONS, OK, REFUSING, LinkHealth

URL = "http://receiver/api/v1/write"


class Clock:
    def __init__(self) -> None:
        self.now = 5.0  # a clock reading below the durations measured

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _health(clock: Clock, pending: int = 7, summary_s: float = 60.0) -> LinkHealth:
    return LinkHealth(URL, lambda: pending, summary_s, clock=clock, wall=lambda: 5_000.5)


def _lines(caplog) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == "exporters.remote_write"]
    caplog.clear()
    return lines


def test_counts_start_at_zero_and_count_every_event(clock):
    health = _health(clock)
    assert health.counts() == health.counts().__class__(
        0, 0, dict.fromkeys(DROP_REASONS, 0), 0, 0, 7, OK, 0.0
    )
    health.delivered(5)
    health.delivered(2)
    health.failed("HTTP 503", retry=True)
    health.failed("HTTP 503", retry=False)
    health.refused(3, "HTTP 400")
    health.dropped("too_old", 4, "old")
    health.dropped("too_old", 1, "old")
    health.late(6)
    health.late(1)
    counts = health.counts()
    assert (counts.sent, counts.rejected, counts.late, counts.retries) == (7, 3, 7, 1)
    assert counts.dropped == {"backlog_full": 0, "too_old": 5, "refused": 3, "shutdown": 0}
    assert counts.last_success == 5_000.5 and counts.state == REFUSING and counts.pending == 7


def test_each_state_change_is_logged_once_and_summarized_every_summary_s(clock, caplog):
    caplog.set_level(logging.INFO, logger="exporters.remote_write")
    health = _health(clock, summary_s=10.0)
    health.delivered(1)
    assert _lines(caplog) == [] and health.problem() is None
    health.failed("HTTP 503: busy", retry=True)
    assert _lines(caplog) == [
        f"remote_write {URL}: receiver unavailable (HTTP 503: busy); writes wait in the "
        "backlog and are retried; a summary follows every 10 s while this lasts"
    ]
    clock.now += 9.9
    health.failed("HTTP 503: busy", retry=True)
    assert _lines(caplog) == []  # before summary_s
    assert health.problem() == f"remote_write {URL}: down for 10 s"
    clock.now += 0.1
    health.failed("timeout", retry=True)
    assert _lines(caplog) == [
        f"remote_write {URL}: down for 10 s; in the last 10 s: 2 failed requests, "
        "7 samples pending; last: timeout"
    ]
    clock.now += 5
    health.failed("timeout", retry=True)
    assert _lines(caplog) == []  # counted from the summary
    clock.now += 5
    health.delivered(4)
    assert _lines(caplog) == [
        f"remote_write {URL}: writes accepted again after 20 s down (1 failed requests, "
        "7 samples pending)"
    ]
    assert health.state == OK and health.problem() is None


def test_refusals_are_logged_once_then_summarized_and_count_as_refused_drops(clock, caplog):
    health = _health(clock, summary_s=0.0)
    health.refused(3, "HTTP 400: bad")
    lines = _lines(caplog)
    assert lines[0] == (
        f"remote_write {URL}: write of 3 samples refused (HTTP 400: bad); refused samples "
        "are dropped (counted); a summary follows every 0 s while this lasts"
    )
    assert lines[1:] == [
        f"remote_write {URL}: refusing for 0 s; in the last 0 s: 7 samples pending; "
        "last: HTTP 400: bad"  # counted before the state changed: in no period
    ]
    health.dropped("refused", 1, "again")  # logged with the state change already
    health.refused(2, "HTTP 400")
    assert _lines(caplog) == [
        f"remote_write {URL}: refusing for 0 s; in the last 0 s: 1 refused drops, "
        "1 refused requests, 2 refused samples, 7 samples pending; last: HTTP 400"
    ]
    assert health.problem() == f"remote_write {URL}: refusing for 0 s"


def test_the_first_drop_of_each_reason_is_logged_once_per_degraded_period(clock, caplog):
    health = _health(clock)
    health.dropped("backlog_full", 2, "full")
    health.dropped("backlog_full", 2, "full")
    health.dropped("too_old", 1, "old")
    assert _lines(caplog) == [
        f"remote_write {URL}: 2 samples dropped: full",
        f"remote_write {URL}: 1 samples dropped: old",
    ]
    health.failed("down", retry=True)  # a new period
    _lines(caplog)
    health.dropped("backlog_full", 3, "full")
    assert _lines(caplog) == [f"remote_write {URL}: 3 samples dropped: full"]


def test_collect_gives_every_family_from_the_counters_now(clock):
    health = _health(clock, pending=9)
    health.delivered(5)
    health.refused(2, "HTTP 400")
    health.failed("down", retry=True)
    health.dropped("shutdown", 1, "bye")
    health.late(3)
    values = {
        (sample.name, sample.labels.get("reason")): sample.value
        for family in health.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    families = {family.name for family in health.collect()}
    assert {family.name for family in health.describe()} == families
    prefix = "rltel_collector_remote_write_"
    assert values == {
        (f"{prefix}samples_sent_total", None): 5,
        (f"{prefix}samples_rejected_total", None): 2,
        (f"{prefix}samples_dropped_total", "backlog_full"): 0,
        (f"{prefix}samples_dropped_total", "too_old"): 0,
        (f"{prefix}samples_dropped_total", "refused"): 2,
        (f"{prefix}samples_dropped_total", "shutdown"): 1,
        (f"{prefix}samples_late_total", None): 3,
        (f"{prefix}retries_total", None): 1,
        (f"{prefix}samples_pending", None): 9,
        (f"{prefix}degraded", None): 1,
        (f"{prefix}last_success_timestamp_seconds", None): 5_000.5,
    }
    assert health.state == DOWN
    health.refused(1, "HTTP 400")
    (degraded,) = [f for f in health.collect() if f.name == f"{prefix}degraded"]
    assert degraded.samples[0].value == 1  # refusing is degraded too


def test_counts_are_a_frozen_copy(clock):
    counts = _health(clock).counts()
    with pytest.raises(dataclasses.FrozenInstanceError):
        counts.sent = 1


def test_writes_accepted_after_refusals_end_the_refusing_state(clock, caplog):
    caplog.set_level(logging.INFO, logger="exporters.remote_write")
    health = _health(clock)
    health.refused(2, "HTTP 400")
    clock.now += 3
    _lines(caplog)
    health.delivered(1)
    assert health.state == OK and health.problem() is None
    assert _lines(caplog) == [
        f"remote_write {URL}: writes accepted again after 3 s refusing (7 samples pending)"
    ]


def test_a_summary_follows_every_60_s_by_default(clock, caplog):
    LinkHealth(URL, lambda: 0, clock=clock).failed("down", retry=True)
    assert "a summary follows every 60 s while this lasts" in caplog.text
