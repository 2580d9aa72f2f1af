"""The remote-write sink's own sources: what a scrape of the collector would also record."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from exporters.prometheus.sink import store_families
from exporters.prometheus.store import SeriesStore


class Up:
    """``up`` = 1 of the collector (what a scrape of it would record)."""

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("up", "1: the collector is running and writing", 1.0)


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
