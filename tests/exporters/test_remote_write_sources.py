"""The remote-write sink's own sources (exporters.remote_write.sources): written in full at
every refresh, a series gone since the last one ended with a staleness marker."""

from __future__ import annotations

import math
import threading
import time

from prometheus_client.metrics_core import GaugeMetricFamily

from exporters.prometheus.store import SeriesStore
from exporters.remote_write.sources import Sources, StoreFamilies, Up
from exporters.remote_write.timeline import Timeline

OWN = {"job": "rltel-collector"}


class Phases:
    """A source whose series the test changes: one gauge per rank."""

    def __init__(self) -> None:
        self.ranks = [0, 1]

    def collect(self):
        family = GaugeMetricFamily("phase", "help", labels=["rank"])
        for rank in self.ranks:
            family.add_metric([str(rank)], 1.0)
        yield family


def _names(samples) -> list[tuple[str, str | None, bool]]:
    return [
        (dict(key)["__name__"], dict(key).get("rank"), math.isnan(value))
        for key, value, _ in samples
    ]


def test_every_source_is_written_in_full_and_a_series_gone_is_ended_once():
    sources, phases, timeline = Sources(), Phases(), Timeline({})
    sources.add(phases)
    sources.add(Up())
    first = sources.write(timeline, sources.collect(), 1_000, OWN)
    assert _names(first) == [("phase", "0", False), ("phase", "1", False), ("up", None, False)]
    assert all(dict(key)["job"] == "rltel-collector" and ts == 1_000 for key, _, ts in first)
    again = sources.write(timeline, sources.collect(), 1_001, OWN)  # not idle: written anyway
    assert _names(again) == _names(first)
    phases.ranks = [1]
    gone = sources.write(timeline, sources.collect(), 2_000, OWN)
    assert _names(gone) == [("phase", "1", False), ("up", None, False), ("phase", "0", True)]
    assert sources.write(timeline, sources.collect(), 3_000, OWN) == [
        (key, 1.0, 3_000) for key, _, _ in gone[:2]
    ]  # ended once


def test_up_is_one_and_a_store_gives_its_own_families_under_its_lock():
    (up,) = Up().collect()
    assert [(s.name, s.value) for s in up.samples] == [("up", 1.0)]
    lock = threading.Lock()
    families = StoreFamilies(SeriesStore(10, 60.0, time.monotonic), lock, lambda: 3)
    values = {s.name: s.value for family in families.collect() for s in family.samples}
    assert values["rltel_prometheus_export_errors_total"] == 3
    assert not lock.locked()
