"""The remote-write sink's own sources: what a scrape of the collector would also record."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from exporters.prometheus.families import Family, describe
from exporters.prometheus.sink import store_families
from exporters.prometheus.store import SeriesStore
from exporters.remote_write import proto
from exporters.remote_write.timeline import Key, Timeline


class Sources:
    """The sources a refresh writes in full, and which of their series it wrote last."""

    def __init__(self) -> None:
        self._sources: list[Collector] = []
        self._live: set[Key] = set()

    def add(self, source: Collector) -> None:
        """Write ``source``'s families at every refresh."""
        self._sources.append(source)

    def collect(self) -> list[Metric]:
        """Every source's families now (outside the sink's lock: sources take their own)."""
        return [family for source in self._sources for family in source.collect()]

    def write(
        self, timeline: Timeline, families: list[Metric], now_ms: int, labels: Mapping[str, str]
    ) -> list[proto.Sample]:
        """The samples of ``families`` at ``now_ms``, and a staleness marker for each series
        written at the last refresh that is gone now (a rank that left its phase, a run
        closed); under the sink's lock."""
        written = timeline.idle(families, now_ms, None, labels)
        live = {key for key, _, _ in written}
        ended = timeline.ended(self._live - live, now_ms)
        self._live = live
        return written + ended


class Up:
    """``up`` = 1 of the collector (what a scrape of it would record)."""

    FAMILY = Family("up", "gauge", "1: the collector is running and writing")

    def describe(self) -> list[Metric]:
        return describe([self.FAMILY])

    def collect(self) -> Iterator[Metric]:
        yield self.FAMILY.build(1.0)


class StoreFamilies:
    """The ``rltel_prometheus_*`` families of a series store (series, overflow), as the
    Prometheus sink serves its own: the series-limit panel and alert read them.

    Args:
        store: the sink's series store.
        lock: the lock that guards ``store``.
        errors: ``() -> snapshots the store rejected``.
    """

    def __init__(self, store: SeriesStore, lock: threading.Lock, errors: Callable[[], int]) -> None:
        self._store, self._lock, self._errors = store, lock, errors

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = store_families(self._store, self._errors())
        yield from families
