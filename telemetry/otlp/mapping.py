"""OTLP data points -> Snapshot points, one handler per OTLP metric kind.

=====================================  ==============================================
OTLP                                   Snapshot point
=====================================  ==============================================
Gauge (int or double)                  ``Gauge``
Sum, monotonic, cumulative             ``Counter`` (value and start time as sent)
Sum, monotonic, delta                  ``Counter``: running total per series
Sum, non-monotonic (either)            ``Gauge``: the level (delta: running total)
Histogram, delta                       ``Histogram`` window
Histogram, cumulative                  ``Histogram`` window: difference to the last point
ExponentialHistogram                   ``Histogram`` with explicit bounds from its buckets
Summary                                ``Gauge`` per quantile (attribute ``quantile``),
                                       ``Counter`` ``<name>_count`` and ``<name>_sum``
=====================================  ==============================================

rltel's wire contract on top (:mod:`telemetry.otlp.wire`): a description
``rltel.reduce=<type>`` restores a histogram's reduce type, and ``rltel.reduce=scalar``
turns the window into a ``ScalarMean`` (value = sum/count, count); the step
gauges fill the step instead of becoming points.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, StatReduce
from telemetry.otlp.fast_points import (
    trusted_counter,
    trusted_gauge,
    trusted_histogram,
    trusted_scalar_mean,
)
from telemetry.otlp.series import SeriesTable
from telemetry.otlp.temporality import SumState, histogram_window
from telemetry.otlp.values import (
    LabelLimits,
    Rejected,
    attributes,
    explicit,
    exponential,
    number,
)
from telemetry.otlp.wire import REDUCE_BY_DESCRIPTION, STEP_FIELDS, reduce_of

__all__ = ["DELTA", "Handler", "PointMapper"]

DELTA = 1  # AGGREGATION_TEMPORALITY_DELTA
SCALAR = StatReduce.SCALAR

Handler = Callable[..., None]
"""``(metric, name, data, point, out, step, resource)``: appends the points of one data
point to ``out`` (or its step field to ``step``), or raises ``Rejected``/``OverLimit``."""


class PointMapper:
    """The handlers of one decoder: its label limits, series table and start time.

    Args:
        label_limits: bounds on attributes; a point over one raises ``OverLimit``.
        series: the temporality state of cumulative histograms and delta sums.
        started_ns: the collector's start (epoch ns); see :mod:`telemetry.otlp.temporality`.
    """

    def __init__(self, label_limits: LabelLimits, series: SeriesTable, started_ns: int) -> None:
        self.label_limits = label_limits
        self._series = series
        self.started_ns = started_ns
        self.handlers: dict[str, Handler] = {
            "gauge": self._gauge,
            "sum": self._sum,
            "histogram": self._explicit_histogram,
            "exponential_histogram": self._exponential_histogram,
            "summary": self._summary,
        }
        self.delta_histogram: Handler = self._delta_histogram
        """The handler of a delta histogram: rltel's trainer histograms and scalar windows."""

    def _gauge(self, metric, name: str, data, point, out: list, step: dict, resource) -> None:
        value = number(point)
        if name in STEP_FIELDS:
            if not math.isfinite(value):
                raise Rejected(f"step value {value!r} is not finite")
            step[STEP_FIELDS[name]] = int(value)
            return
        kvs = point.attributes
        attrs = attributes(kvs, self.label_limits) if kvs else ()
        out.append(trusted_gauge(name, value, metric.unit, attrs))

    def _sum(self, metric, name: str, data, point, out: list, step: dict, resource) -> None:
        value = number(point)
        kvs = point.attributes
        attrs = attributes(kvs, self.label_limits) if kvs else ()
        monotonic = data.is_monotonic
        if data.aggregation_temporality == DELTA:
            key = ("sum", resource, name, attrs)
            state = self._series.get(key)
            if state is None:
                state = self._series.add(key, name, SumState(point.start_time_unix_nano, 0.0))
            if monotonic and value < 0:
                raise Rejected("negative delta in a monotonic sum")
            start = state.start_time_unix_nano
            value = state.total + value
            self._series.put(key, SumState(start, value))
        else:
            start = point.start_time_unix_nano
        if not monotonic:
            out.append(trusted_gauge(name, value, metric.unit, attrs))
            return
        if not math.isfinite(value) or value < 0:
            raise Rejected(f"monotonic sum value {value!r} is not a finite total >= 0")
        out.append(trusted_counter(name, value, metric.unit, attrs, start))

    def _delta_histogram(self, metric, name: str, data, point, out, step, resource) -> None:
        """The hot path: rltel's trainer histograms and scalar windows (delta, no buckets)."""
        if point.explicit_bounds:
            self._explicit_histogram(metric, name, data, point, out, step, resource)
            return
        kvs = point.attributes
        attrs = attributes(kvs, self.label_limits) if kvs else ()
        description = metric.description
        reduce = REDUCE_BY_DESCRIPTION.get(description) or reduce_of(description)
        count, total = point.count, point.sum  # a non-finite sum is the sender's value
        if reduce is SCALAR:
            if count > 0:
                out.append(trusted_scalar_mean(name, total / count, count, metric.unit, attrs))
            return
        if count == 0:
            out.append(
                trusted_histogram(name, 0, total, None, None, (), (), reduce, metric.unit, attrs)
            )
            return
        # optional fields read 0.0 when unset: ask HasField only then
        if total == 0.0 and not point.HasField("sum"):
            total = math.nan
        low, high = point.min, point.max
        if low == 0.0 and not point.HasField("min"):
            low = None
        if high == 0.0 and not point.HasField("max"):
            high = None
        # no bounds, no buckets: the Histogram invariant holds without its check
        out.append(
            trusted_histogram(name, count, total, low, high, (), (), reduce, metric.unit, attrs)
        )

    def _explicit_histogram(self, metric, name, data, point, out, step, resource) -> None:
        self._histogram(metric, name, data, point, out, resource, explicit(point))

    def _exponential_histogram(self, metric, name, data, point, out, step, resource) -> None:
        self._histogram(metric, name, data, point, out, resource, exponential(point))

    def _histogram(self, metric, name, data, point, out, resource, current) -> None:
        kvs = point.attributes
        attrs = attributes(kvs, self.label_limits) if kvs else ()
        reduce = reduce_of(metric.description)
        if data.aggregation_temporality != DELTA:
            key = ("histogram", resource, name, attrs)
            previous = self._series.get(key)
            if previous is None:
                self._series.add(key, name, current)
            else:
                self._series.put(key, current)
            window = histogram_window(previous, current, self.started_ns)
            if window is None:
                return
            current = window
        if reduce is SCALAR:
            if current.count > 0:
                value = current.sum / current.count
                out.append(ScalarMean(name, value, current.count, metric.unit, attrs))
            return
        out.append(
            Histogram(
                name,
                current.count,
                current.sum,
                current.min if current.count else None,
                current.max if current.count else None,
                current.bounds,
                current.bucket_counts,
                reduce,
                metric.unit,
                attrs,
            )
        )

    def _summary(self, metric, name: str, data, point, out: list, step: dict, resource) -> None:
        attrs = attributes(point.attributes, self.label_limits)
        for quantile in point.quantile_values:
            labels = (*attrs, ("quantile", repr(float(quantile.quantile))))
            out.append(Gauge(name, quantile.value, unit=metric.unit, attributes=labels))
        start = point.start_time_unix_nano
        out.append(Counter(name + "_count", float(point.count), "", attrs, start))
        if math.isfinite(point.sum) and point.sum >= 0:
            out.append(Counter(name + "_sum", point.sum, metric.unit, attrs, start))
