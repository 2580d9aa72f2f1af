"""Prometheus text exposition -> Snapshot points, keeping one target's series between scrapes.

Parsed with ``prometheus_client.parser.text_string_to_metric_families``. Per family type:

- ``counter``: a :class:`~telemetry.model.snapshot.Counter` with the target's cumulative total
  (the sink adds ``_total`` back to the family name, so the name is unchanged); its
  ``<name>_created`` gauge, where the target serves one, becomes the counter's start time
  instead of a series of its own;
- ``histogram``: a :class:`~telemetry.model.snapshot.Histogram` *window*, the bucket, count and
  sum increases since the previous scrape (all of it on first sight and after a reset, when a
  cumulative value went down), because the sinks add windows up into cumulative series; the
  buckets keep the target's bounds;
- ``gauge``, ``untyped``/``unknown``, ``info``, ``stateset``: a Gauge per sample, by its name;
- ``summary``: its quantiles as a Gauge with the ``quantile`` label, ``_sum``/``_count`` as gauges.

Counter increases since the previous scrape (a decrease is a restart: the new total is the
increase, as Prometheus's ``rate`` takes it) and the histogram windows summed per family are
kept for the engine figures (:mod:`collector.scrape.engine_figures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

from prometheus_client.parser import text_string_to_metric_families

from telemetry.model.snapshot import Attributes, Counter, Gauge, Histogram, Point

__all__ = ["Converter", "Scraped"]

_GAUGE_TYPES = ("gauge", "untyped", "unknown", "info", "stateset")
_CUMULATIVE = ("counter", "histogram")


@dataclass(frozen=True, slots=True)
class Scraped:
    """One scrape, converted.

    Attributes:
        points: every series of the exposition, for the shared sinks.
        increases: counter family -> increase since the previous scrape, summed over the
            series seen in both (a family seen for the first time is absent).
        windows: histogram family -> its series' windows added up (series with other
            bounds than the first left out).
    """

    points: tuple[Point, ...]
    increases: dict[str, float] = field(default_factory=dict)
    windows: dict[str, Histogram] = field(default_factory=dict)


@dataclass(slots=True)
class _Cumulative:
    bounds: tuple[float, ...]
    buckets: list[float]  # cumulative counts per bound, +Inf last
    count: float
    sum: float


class Converter:
    """Converts one target's expositions; holds its last counter totals and histograms."""

    def __init__(self) -> None:
        self._totals: dict[tuple[str, Attributes], float] = {}
        self._histograms: dict[tuple[str, Attributes], _Cumulative] = {}

    def convert(self, text: str) -> Scraped:
        """The points of one exposition.

        Raises:
            ValueError: ``text`` is not the Prometheus text format (the parser's message).
        """
        families = list(text_string_to_metric_families(text))
        cumulative = {f.name for f in families if f.type in _CUMULATIVE}
        created: dict[str, dict[Attributes, float]] = {}
        for family in families:
            base = family.name.removesuffix("_created")
            if family.type == "gauge" and base != family.name and base in cumulative:
                created[base] = {_attributes(s.labels): s.value for s in family.samples}
        points: list[Point] = []
        increases: dict[str, float] = {}
        windows: dict[str, Histogram] = {}
        totals: dict[tuple[str, Attributes], float] = {}
        histograms: dict[tuple[str, Attributes], _Cumulative] = {}
        for family in families:
            name, kind = family.name, family.type
            if name.removesuffix("_created") in created and name.endswith("_created"):
                continue
            if kind == "counter":
                starts = created.get(name, {})
                for sample in family.samples:
                    if sample.name != name and sample.name != name + "_total":
                        continue
                    attrs = _attributes(sample.labels)
                    value = float(sample.value)
                    start = starts.get(attrs)
                    points.append(Counter(name, value, "", attrs, _nanos(start)))
                    totals[(name, attrs)] = value
                    previous = self._totals.get((name, attrs))
                    if previous is not None:
                        step = value if value < previous else value - previous
                        increases[name] = increases.get(name, 0.0) + step
            elif kind == "histogram":
                for attrs, state in _histogram_series(family).items():
                    window = self._window(name, attrs, state)
                    histograms[(name, attrs)] = state
                    points.append(window)
                    windows[name] = _added(windows.get(name), window)
            elif kind == "summary":
                for sample in family.samples:
                    points.append(
                        Gauge(
                            sample.name, float(sample.value), attributes=_attributes(sample.labels)
                        )
                    )
            elif kind in _GAUGE_TYPES:
                for sample in family.samples:
                    attrs = _attributes(sample.labels)
                    points.append(Gauge(sample.name, float(sample.value), attributes=attrs))
        self._totals, self._histograms = totals, histograms
        return Scraped(tuple(points), increases, windows)

    def _window(self, name: str, attrs: Attributes, now: _Cumulative) -> Histogram:
        """The increase since the previous scrape; all of ``now`` if new or reset."""
        before = self._histograms.get((name, attrs))
        reset = (
            before is None
            or before.bounds != now.bounds
            or now.count < before.count
            or any(b < a for a, b in zip(before.buckets, now.buckets))
        )
        if reset:
            cumulative, count, total = now.buckets, now.count, now.sum
        else:
            cumulative = [b - a for a, b in zip(before.buckets, now.buckets)]
            count, total = now.count - before.count, now.sum - before.sum
        per_bucket = [cumulative[0], *(b - a for a, b in pairwise(cumulative))]
        counts = tuple(max(0, round(n)) for n in per_bucket)
        return Histogram(
            name, round(count), total, None, None, now.bounds, counts, attributes=attrs
        )


def _histogram_series(family) -> dict[Attributes, _Cumulative]:
    """Each series' cumulative buckets (sorted by bound), count and sum."""
    buckets: dict[Attributes, dict[float, float]] = {}
    counts: dict[Attributes, float] = {}
    sums: dict[Attributes, float] = {}
    name = family.name
    for sample in family.samples:
        labels = dict(sample.labels)
        le = labels.pop("le", None)
        attrs = _attributes(labels)
        if sample.name == name + "_bucket" and le is not None:
            buckets.setdefault(attrs, {})[float(le)] = float(sample.value)
        elif sample.name == name + "_count":
            counts[attrs] = float(sample.value)
        elif sample.name == name + "_sum":
            sums[attrs] = float(sample.value)
    out = {}
    for attrs, by_bound in buckets.items():
        bounds = tuple(sorted(b for b in by_bound if not math.isinf(b)))
        count = counts.get(attrs, by_bound.get(math.inf, 0.0))
        cumulative = [by_bound[b] for b in bounds] + [by_bound.get(math.inf, count)]
        out[attrs] = _Cumulative(bounds, cumulative, count, sums.get(attrs, 0.0))
    return out


def _added(merged: Histogram | None, window: Histogram) -> Histogram:
    """Two windows of one family added (the first's bounds win; others are left out)."""
    if merged is None:
        return Histogram(
            window.metric, window.count, window.sum, None, None, window.bounds, window.bucket_counts
        )
    if merged.bounds != window.bounds:
        return merged
    counts = tuple(a + b for a, b in zip(merged.bucket_counts, window.bucket_counts))
    return Histogram(
        merged.metric,
        merged.count + window.count,
        merged.sum + window.sum,
        None,
        None,
        merged.bounds,
        counts,
    )


def _attributes(labels: dict[str, str]) -> Attributes:
    return tuple(sorted(labels.items()))


def _nanos(seconds: float | None) -> int:
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return 0
    return int(seconds * 1e9)
