"""Sample timestamps of the remote-write sink (exporters.remote_write.timeline): labels
sorted with the external ones, every series' timestamps increasing, staleness markers."""

from __future__ import annotations

import math
import struct

from prometheus_client.metrics_core import GaugeMetricFamily

from exporters.remote_write.timeline import STALE, Timeline

EXTERNAL = {"cluster": "k", "job": "external"}


def _family(name: str, value: float, **labels: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, "help", labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _key(name: str, **labels: str) -> tuple:
    return tuple(sorted({**labels, "__name__": name}.items()))


def test_stamp_sorts_labels_and_a_series_own_label_wins_over_the_external_one():
    timeline = Timeline(EXTERNAL)
    samples = timeline.stamp([_family("loss", 2, job="trainer")], 100, {"instance": "i"})
    assert samples == [(_key("loss", cluster="k", job="trainer", instance="i"), 2.0, 100)]
    assert timeline.stamp([_family("up", 1)], 100) == [(_key("up", **EXTERNAL), 1.0, 100)]
    assert len(timeline) == 2 and timeline.late == 0


def test_a_sample_at_or_before_its_series_last_one_is_written_1_ms_after_it():
    timeline = Timeline({})
    times = (100, 100, 50, 103, 104)
    stamps = [timeline.stamp([_family("x", i)], at)[0][2] for i, at in enumerate(times)]
    assert stamps == [100, 101, 102, 103, 104] and timeline.late == 2
    assert timeline.stamp([_family("y", 0)], 1)[0][2] == 1  # another series: its own time


def test_the_last_sample_again_is_not_written_twice():
    """A step the restarted collector replayed from its journal, then resent by its trainer's
    spool flush: the same value at the same commit time is that sample again (the reliability
    ledger found it written 1 ms later, a second sample of step 32)."""
    timeline = Timeline({})
    assert [s[2] for s in timeline.stamp([_family("x", 32)], 100)] == [100]
    assert timeline.stamp([_family("x", 32)], 100) == []  # the same sample: not again
    assert timeline.late == 0
    assert [s[2] for s in timeline.stamp([_family("x", 33)], 100)] == [101]  # another value
    assert timeline.stamp([_family("x", 32)], 100)[0][2] == 102  # not the last one: moved
    assert timeline.late == 2
    timeline.stamp([_family("n", math.nan)], 100)
    assert timeline.stamp([_family("n", math.nan)], 100) == []  # the same NaN bits
    assert [s[2] for s in timeline.stamp([_family("n", STALE)], 100)] == [101]  # not the NaN


def test_idle_writes_series_not_written_within_idle_ms_and_unseen_ones():
    timeline = Timeline({})
    timeline.stamp([_family("a", 1)], 1_000)
    families = [_family("a", 1), _family("b", 2)]
    assert [s[0] for s in timeline.idle(families, 1_499, 500)] == [_key("b")]  # 499 ms: busy
    assert [s[0] for s in timeline.idle(families, 1_500, 500)] == [_key("a")]  # 500: idle
    assert len(timeline.idle(families, 1_501, None)) == 2  # None: every series
    timeline.stamp([_family("a", 1)], 90_000)  # committed ahead of now (a sender's clock)
    assert timeline.idle([_family("a", 1)], 80_000, 500) == []  # not idle


def test_ended_marks_only_series_written_before_with_prometheus_staleness_nan():
    assert struct.pack("<d", STALE) == struct.pack("<Q", 0x7FF0000000000002)
    assert math.isnan(STALE)
    timeline = Timeline({})
    timeline.stamp([_family("a", 1)], 100)
    (marker,) = timeline.ended([_key("a"), _key("never")], 100)
    assert marker[0] == _key("a") and marker[2] == 101
    assert struct.pack("<d", marker[1]) == struct.pack("<d", STALE)


def test_take_up_continues_after_the_later_of_both_processes_timestamps():
    timeline = Timeline({})
    timeline.stamp([_family("a", 1), _family("b", 1)], 500)
    timeline.take_up({_key("a"): 800, _key("b"): 200, _key("c"): 300})
    assert timeline.last() == {_key("a"): 800, _key("b"): 500, _key("c"): 300}
    assert timeline.stamp([_family("a", 1)], 600)[0][2] == 801


def test_forget_unseen_forgets_series_idle_did_not_see_since_the_last_call():
    timeline = Timeline({})
    timeline.stamp([_family("a", 1), _family("b", 1)], 100)
    timeline.take_up({_key("c"): 50})  # taken up: seen once
    timeline.idle([_family("a", 1)], 200, 10)
    timeline.forget_unseen()
    assert set(timeline.last()) == {_key("a"), _key("c")}
    timeline.forget_unseen()  # nothing seen since
    assert timeline.last() == {}
    assert timeline.stamp([_family("a", 1)], 150)[0][2] == 150  # forgotten: its own time
