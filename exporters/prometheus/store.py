"""The Prometheus sink's state: cumulative series built from Snapshots, and their families.

Snapshot histograms are windows (deltas): each series accumulates count, sum and bucket
counts into cumulative totals and keeps the last non-empty window's avg/min/max for the
companion gauges. A window whose sum is not finite (a NaN loss, an infinite KL) shows in
those gauges (NaN, ±Inf: the NotFinite alerts read them) but stays out of the cumulative
``_bucket``/``_count``/``_sum``, which it would otherwise turn NaN or infinite for good; the
store counts it (``nonfinite_windows``). Counters are cumulative already; gauges are
last-value. Every series is labelled by :mod:`exporters.prometheus.labels`. A metric holds
at most ``series_limit`` series; points of further label sets go to one
``otel_metric_overflow="true"`` series per resource and are counted.

An overflow counter is the sum of the overflowed series' totals: the store remembers each
overflowed series' last total (by a hash of its labels, at most ``MAX_OVERFLOW_TRACKED``
per store) and adds only its increase, so the overflow series never decreases while those
series keep counting (a series whose total went down restarted: its new total is added).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from exporters.prometheus.labels import OVERFLOW_LABEL, Labels, point_labels, resource_labels
from exporters.prometheus.naming import (
    Kind,
    MetricKey,
    histogram_gauge_names,
    metric_name,
    resolve_names,
    sample_names,
    unit_suffix,
)
from telemetry.model import names
from telemetry.model.snapshot import (
    Attributes,
    Counter,
    Gauge,
    Histogram,
    ScalarMean,
    Snapshot,
    StatReduce,
)
from telemetry.otlp.wire import description

SELF_PREFIX = "rltel_prometheus_"
MAX_OVERFLOW_TRACKED = 200_000  # overflowed counter series remembered (~100 bytes each)
CLOSED_KEY = MetricKey(names.CLOSED_METRIC, "gauge")


@dataclass(slots=True)
class _Hist:
    bounds: tuple[float, ...]
    count: int = 0
    sum: float = 0.0
    buckets: list[int] = field(default_factory=list)
    avg: float | None = None
    min: float | None = None
    max: float | None = None
    seen: float = 0.0

    def add(self, point: Histogram, overflow: bool, now: float) -> bool:
        """Accumulate one window; mismatched bounds (overflow only) land in ``+Inf``.

        Returns False for a window with a non-finite sum: its avg/min/max are shown, its
        count, sum and buckets are not added to the cumulative totals.
        """
        count, total, buckets = point.count, point.sum, point.bucket_counts
        if count > 0:
            self.avg = total / count
            self.min, self.max = point.min, point.max
        self.seen = now
        if not math.isfinite(total):
            return False
        self.count += count
        self.sum += total
        if buckets and point.bounds == self.bounds:
            for i, n in enumerate(buckets):
                self.buckets[i] += n
        elif overflow or not buckets:
            self.buckets[-1] += count
        return True


@dataclass(slots=True)
class _Value:
    value: float
    seen: float


@dataclass(slots=True)
class _Family:
    key: MetricKey
    help: str
    series: dict[Labels, _Hist | _Value] = field(default_factory=dict)
    overflow: dict[Labels, _Hist | _Value] = field(default_factory=dict)
    # overflow labels -> {hash of an overflowed counter series' labels: its last total}
    overflowed: dict[Labels, dict[int, float]] = field(default_factory=dict)


class SeriesStore:
    """Cumulative series of every metric seen, with limits, expiry and collision-free names.

    Args:
        series_limit: regular series per metric; more go to the overflow series.
        expire_seconds: series (and ``target_info`` entries) not updated for this long
            are dropped.

    A closed marker (``rltel/closed``) goes to 0 once its resource sends without it (resumed).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self, series_limit: int, expire_seconds: float, clock: Callable[[], float]
    ) -> None:
        self.series_limit = series_limit
        self.expire_seconds = expire_seconds
        self.clock = clock
        self.families: dict[MetricKey, _Family] = {}
        self._family_of: dict[tuple[type, str, str], _Family] = {}  # point type, metric, unit
        self.names: dict[MetricKey, str] = {}
        self.targets: dict[Labels, tuple[Labels, float]] = {}
        self.resources: dict[Attributes, tuple[Labels, Labels]] = {}
        self.reserved: set[str] = {"target", "target_info"}
        self._closed_family: _Family | None = None  # and the resources it marks closed:
        self._closed: set[Labels] = set()
        self.overflowed_points = 0
        self.nonfinite_windows = 0
        self.tracked_overflow = 0
        self.expired_series = 0
        self.snapshots = 0
        self.points = 0

    # -- ingest ------------------------------------------------------------------------

    def apply(self, snapshot: Snapshot) -> None:
        """Fold one snapshot into the series."""
        now = self.clock()
        base, target = self._resource(snapshot.resource)
        self.targets[base] = (target, now)
        overflow_labels = (*base, OVERFLOW_LABEL)
        families_before = len(self.families)
        family_of, limit = self._family_of, self.series_limit
        closing = False
        for point in snapshot.points:
            family = family_of.get((type(point), point.metric, point.unit))
            if family is None:
                family = self._family(point)
            closing = closing or family is self._closed_family
            attrs = point.attributes
            labels = base + point_labels(attrs) if attrs else base
            table = family.series
            state = table.get(labels)
            overflow = state is None and len(table) >= limit
            if overflow:
                self.overflowed_points += 1
                if isinstance(point, Counter):
                    self._overflow_counter(family, overflow_labels, labels, point.value, now)
                    continue
                labels, table = overflow_labels, family.overflow
                state = table.get(labels)
            if isinstance(point, Histogram):
                if state is None or (not overflow and point.bounds != state.bounds):
                    state = table[labels] = _Hist(
                        point.bounds, buckets=[0] * (len(point.bounds) + 1)
                    )
                if not state.add(point, overflow, now):
                    self.nonfinite_windows += 1
            elif state is None:
                table[labels] = _Value(float(point.value), now)
            else:  # a gauge's or counter's last value
                state.value, state.seen = float(point.value), now
        if closing:
            self._closed.add(base)
        elif base in self._closed:
            self._closed.discard(base)
            self._closed_family.series.get(base, _Value(0.0, now)).value = 0.0
        self.snapshots += 1
        self.points += len(snapshot.points)
        if len(self.families) != families_before:
            self._rename()

    def _overflow_counter(
        self, family: _Family, overflow: Labels, labels: Labels, total: float, now: float
    ) -> None:
        """Add the increase of one overflowed counter series to its overflow series."""
        last = family.overflowed.setdefault(overflow, {})
        key = hash(labels)
        previous = last.get(key)
        if previous is None:
            if self.tracked_overflow >= MAX_OVERFLOW_TRACKED:
                return  # past the bound: this series' increases are not added
            self.tracked_overflow += 1
        increase = total if previous is None or total < previous else total - previous
        last[key] = total
        state = family.overflow.get(overflow)
        if state is None:
            family.overflow[overflow] = _Value(float(increase), now)
        else:
            state.value += increase
            state.seen = now

    def _family(self, point) -> _Family:
        """The family of ``point``'s metric, created on first sight; cached by point type."""
        key = _key_of(point)
        family = self.families.get(key)
        if family is None:
            family = self.families[key] = _Family(key, _help(point))
            if key == CLOSED_KEY:
                self._closed_family = family
        self._family_of[(type(point), point.metric, point.unit)] = family
        return family

    def _resource(self, resource: Attributes) -> tuple[Labels, Labels]:
        cached = self.resources.get(resource)
        if cached is None:
            cached = self.resources[resource] = resource_labels(resource)
        return cached

    def reserve(self, names: dict[str, Kind]) -> None:
        """Keep other collectors' family names (``name -> kind``) out of the metrics' names."""
        for name, kind in names.items():
            self.reserved.update(sample_names(name, kind))
        self._rename()

    def _rename(self) -> None:
        self.names = resolve_names(self.families, self.reserved)

    # -- expiry ------------------------------------------------------------------------

    def expire(self) -> None:
        """Drop series, families and targets not updated within ``expire_seconds``."""
        cutoff = self.clock() - self.expire_seconds
        for key in list(self.families):
            family = self.families[key]
            for table in (family.series, family.overflow):
                stale = [labels for labels, state in table.items() if state.seen < cutoff]
                for labels in stale:
                    del table[labels]
                    self.tracked_overflow -= len(family.overflowed.pop(labels, ()))
                self.expired_series += len(stale)
            if not family.series and not family.overflow:
                del self.families[key]
                self.names.pop(key, None)
                self._family_of.clear()
        for labels in [k for k, (_, seen) in self.targets.items() if seen < cutoff]:
            del self.targets[labels]
        self._closed.intersection_update(self.targets)
        if len(self.names) != len(self.families):
            self._rename()

    # -- exposition --------------------------------------------------------------------

    @property
    def collisions(self) -> int:
        """Metrics whose family name was changed to resolve a clash."""
        return sum(
            name != metric_name(key.metric, key.kind, key.unit) for key, name in self.names.items()
        )

    @property
    def series_count(self) -> int:
        return sum(len(f.series) + len(f.overflow) for f in self.families.values())

    def collect(self, since: float | None = None) -> Iterator[Metric]:
        """Families of every metric (histograms built sample by sample) plus ``target_info``.

        Args:
            since: only series (and targets) updated at or after this clock value; None:
                all (the remote-write sink sends the series one snapshot touched).
        """
        for key in sorted(self.families, key=self.names.__getitem__):
            family = self.families[key]
            name = self.names[key]
            unit = unit_suffix(key.unit, key.kind)
            unit = unit if unit and name.removesuffix("_total").endswith("_" + unit) else ""
            states = [*family.series.items(), *family.overflow.items()]
            if since is not None:
                states = [(labels, state) for labels, state in states if state.seen >= since]
            if key.kind == "histogram":
                yield from _histogram(name, family.help, unit, states)
            else:
                family_name = name.removesuffix("_total") if key.kind == "counter" else name
                metric = Metric(family_name, family.help, key.kind, unit)
                for labels, state in states:
                    metric.add_sample(name, dict(labels), state.value)
                yield metric
        info = Metric("target", "Resource attributes of each exporting process", "info")
        for labels, seen in self.targets.values():
            if since is None or seen >= since:
                info.add_sample("target_info", dict(labels), 1.0)
        yield info


def _histogram(name: str, help_text: str, unit: str, states: list) -> Iterator[Metric]:
    """``_bucket``/``_count``/``_sum`` for every series, also with negative bounds."""
    metric = Metric(name, help_text, "histogram", unit)
    gauges = {
        stat: Metric(gauge, f"last window {stat} of {help_text}", "gauge")
        for stat, gauge in histogram_gauge_names(name).items()
    }
    for labels, state in states:
        tags = dict(labels)
        running = 0
        for bound, n in zip((*state.bounds, math.inf), state.buckets, strict=True):
            running += n
            metric.add_sample(f"{name}_bucket", {**tags, "le": floatToGoString(bound)}, running)
        metric.add_sample(f"{name}_count", tags, state.count)
        metric.add_sample(f"{name}_sum", tags, state.sum)
        for stat, gauge in gauges.items():
            value = getattr(state, stat)
            if value is not None:
                gauge.add_sample(gauge.name, tags, value)
    yield metric
    yield from gauges.values()


def _key_of(point) -> MetricKey:
    if isinstance(point, Histogram):
        return MetricKey(point.metric, "histogram", point.unit)
    if isinstance(point, Counter):
        return MetricKey(point.metric, "counter", point.unit)
    if isinstance(point, (Gauge, ScalarMean)):
        return MetricKey(point.metric, "gauge", point.unit)
    raise TypeError(f"not a snapshot point: {type(point).__name__}")


def _help(point) -> str:
    if isinstance(point, Histogram):
        return f"{point.metric} ({description(point.reduce)})"
    if isinstance(point, ScalarMean):
        return f"{point.metric} ({description(StatReduce.SCALAR)})"
    return point.metric
