"""OTLP ``ExportMetricsServiceRequest`` -> Snapshots, for rltel's encoder and any OTel sender.

One Snapshot per ``ResourceMetrics``. The mapping:

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

rltel's wire contract on top: a description ``rltel.reduce=<type>`` restores a histogram's
reduce type, and ``rltel.reduce=scalar`` turns the window into a scalar-stream ``Gauge``
(value = sum/count, count). Gauges ``train.step``, ``train.epoch``, ``train.epoch_step``
become ``Snapshot.step``; resource attribute ``rltel.stream`` becomes ``Snapshot.stream``.
Points that cannot be mapped (no value, a negative monotonic sum, inconsistent buckets,
a series past its limit) are counted as rejected with a reason, never raised.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.temporality import HistogramState, SumState, histogram_window
from telemetry.snapshot import Counter, Gauge, Histogram, Point, Snapshot, StatReduce, Step

DELTA, CUMULATIVE = 1, 2
NO_RECORDED_VALUE = 1
REDUCE_PREFIX = "rltel.reduce="
SCALAR = "scalar"
STEP_GAUGES = {
    "train.step": "global_step",
    "train.epoch": "epoch",
    "train.epoch_step": "epoch_step",
}
MAX_REASONS = 5
_REDUCES = {r.value: r for r in StatReduce}
_REDUCE_OF: dict[str, StatReduce | str] = {
    "": StatReduce.AVG_MIN_MAX,
    REDUCE_PREFIX + SCALAR: SCALAR,
    **{REDUCE_PREFIX + r.value: r for r in StatReduce},
}


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """The snapshots of one request and what could not be mapped."""

    snapshots: tuple[Snapshot, ...]
    accepted: int
    rejected: int
    reasons: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """A one-line summary of the rejections for ``partial_success.error_message``."""
        if not self.rejected:
            return ""
        return f"rejected {self.rejected} data points: " + "; ".join(self.reasons)


class _Rejected(Exception):
    """One data point that cannot be mapped; the message says why."""


class Decoder:
    """Decodes requests into Snapshots, keeping the per-series temporality state.

    Args:
        max_series_per_metric: stateful series (cumulative histograms, delta sums) kept
            per metric name; points of further series are rejected.
        max_series_total: stateful series kept over all metrics.
        started_ns: the collector's start (epoch ns); see :mod:`collector.temporality`.

    Thread-safe: concurrent ``decode`` calls share the state under one lock.
    """

    def __init__(
        self,
        max_series_per_metric: int = 2000,
        max_series_total: int = 100_000,
        started_ns: int | None = None,
    ) -> None:
        self.max_series_per_metric = max_series_per_metric
        self.max_series_total = max_series_total
        self.started_ns = time.time_ns() if started_ns is None else started_ns
        self._lock = threading.Lock()
        self._state: dict[tuple, HistogramState | SumState] = {}
        self._per_metric: dict[str, int] = {}

    @property
    def series(self) -> int:
        """Stateful series currently tracked."""
        return len(self._state)

    def decode(self, request: ExportMetricsServiceRequest) -> DecodeResult:
        """Map every data point of ``request``; never raises for bad data."""
        snapshots: list[Snapshot] = []
        counts = [0, 0]
        reasons: dict[str, None] = {}
        with self._lock:
            for resource_metrics in request.resource_metrics:
                snapshots.append(self._resource(resource_metrics, counts, reasons))
        return DecodeResult(tuple(snapshots), counts[0], counts[1], tuple(reasons)[:MAX_REASONS])

    def _resource(self, rm, counts: list[int], reasons: dict[str, None]) -> Snapshot:
        resource = attributes(rm.resource.attributes)
        points: list[Point] = []
        step: dict[str, int] = {}
        latest = accepted = 0
        for scope_metrics in rm.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                name = metric.name
                if kind is None or not name:
                    counts[1] += 1
                    reasons["a metric without a name or data"] = None
                    continue
                data = getattr(metric, kind)
                if kind == "histogram" and data.aggregation_temporality == DELTA:
                    handle = self._delta_histogram
                elif kind == "histogram" or kind == "exponential_histogram":
                    handle = self._histogram
                elif kind == "gauge":
                    handle = self._gauge
                elif kind == "sum":
                    handle = self._sum
                else:
                    handle = self._summary
                for point in data.data_points:
                    time_unix_nano = point.time_unix_nano
                    if time_unix_nano > latest:
                        latest = time_unix_nano
                    accepted += 1
                    if point.flags & NO_RECORDED_VALUE:
                        continue  # an explicit "no value": accepted, nothing to show
                    try:
                        handle(resource, metric, kind, data, point, points, step)
                    except _Rejected as exc:
                        accepted -= 1
                        counts[1] += 1
                        if len(reasons) < MAX_REASONS:
                            reasons[f"{name!r}: {exc}"] = None
        counts[0] += accepted
        res = dict(resource)
        stream = res.get("rltel.stream") or (
            res["rltel.role"] if res.get("rltel.role") in ("rollout", "eval") else "train"
        )
        return Snapshot(
            points=tuple(points),
            step=_step(step),
            resource=resource,
            time_unix_nano=latest,
            stream=str(stream),
        )

    def _gauge(self, resource, metric, kind, data, point, out: list, step: dict) -> None:
        value = _number(point)
        name = metric.name
        if name in STEP_GAUGES:
            if not math.isfinite(value):
                raise _Rejected(f"step value {value!r} is not finite")
            step[STEP_GAUGES[name]] = int(value)
            return
        attrs = attributes(point.attributes) if point.attributes else ()
        out.append(Gauge(name, value, None, metric.unit, attrs))

    def _sum(self, resource, metric, kind, data, point, out: list, step: dict) -> None:
        value = _number(point)
        attrs = attributes(point.attributes) if point.attributes else ()
        if data.aggregation_temporality == DELTA:
            key = ("sum", resource, metric.name, attrs)
            state = self._state.get(key)
            if state is None:
                state = self._remember(key, metric.name, SumState(point.start_time_unix_nano, 0.0))
            if data.is_monotonic and value < 0:
                raise _Rejected("negative delta in a monotonic sum")
            state.total += value
            value, start = state.total, state.start_time_unix_nano
        else:
            start = point.start_time_unix_nano
        if not data.is_monotonic:
            out.append(Gauge(metric.name, value, None, metric.unit, attrs))
            return
        if not math.isfinite(value) or value < 0:
            raise _Rejected(f"monotonic sum value {value!r} is not a finite total >= 0")
        out.append(Counter(metric.name, value, metric.unit, attrs, start))

    def _delta_histogram(self, resource, metric, kind, data, point, out, step) -> None:
        """The hot path: rltel's trainer histograms and scalar windows (delta, no buckets)."""
        if point.explicit_bounds:
            self._histogram(resource, metric, kind, data, point, out, step)
            return
        attrs = attributes(point.attributes) if point.attributes else ()
        reduce = _reduce(metric.description)
        name, unit = metric.name, metric.unit
        count, total = point.count, point.sum
        if not math.isfinite(total):
            raise _Rejected(f"histogram sum {total!r} is not finite")
        if reduce == SCALAR:
            if count > 0:
                out.append(Gauge(name, total / count, count, unit, attrs))
            return
        if count == 0:
            out.append(Histogram(name, 0, total, None, None, (), (), reduce, unit, attrs))
            return
        # optional fields read 0.0 when unset: ask HasField only then
        if total == 0.0 and not point.HasField("sum"):
            total = math.nan
        low, high = point.min, point.max
        if low == 0.0 and not point.HasField("min"):
            low = None
        if high == 0.0 and not point.HasField("max"):
            high = None
        out.append(Histogram(name, count, total, low, high, (), (), reduce, unit, attrs))

    def _histogram(self, resource, metric, kind, data, point, out: list, step: dict) -> None:
        attrs = attributes(point.attributes) if point.attributes else ()
        delta = data.aggregation_temporality == DELTA
        reduce = _reduce(metric.description)
        current = _explicit(point) if kind == "histogram" else _exponential(point)
        if not delta:
            key = ("histogram", resource, metric.name, attrs)
            previous = self._state.get(key)
            if previous is None:
                self._remember(key, metric.name, current)
            else:
                self._state[key] = current
            window = histogram_window(previous, current, self.started_ns)
            if window is None:
                return
            current = window
        if reduce == SCALAR:
            if current.count > 0:
                value = current.sum / current.count
                out.append(Gauge(metric.name, value, current.count, metric.unit, attrs))
            return
        out.append(
            Histogram(
                metric.name,
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

    def _summary(self, resource, metric, kind, data, point, out: list, step: dict) -> None:
        attrs = attributes(point.attributes)
        for quantile in point.quantile_values:
            labels = (*attrs, ("quantile", repr(float(quantile.quantile))))
            out.append(Gauge(metric.name, quantile.value, None, metric.unit, labels))
        start = point.start_time_unix_nano
        out.append(Counter(metric.name + "_count", float(point.count), "", attrs, start))
        if math.isfinite(point.sum) and point.sum >= 0:
            out.append(Counter(metric.name + "_sum", point.sum, metric.unit, attrs, start))

    def _remember(self, key: tuple, metric: str, state):
        held = self._per_metric.get(metric, 0)
        if held >= self.max_series_per_metric:
            raise _Rejected(f"series limit {self.max_series_per_metric} reached")
        if len(self._state) >= self.max_series_total:
            raise _Rejected(f"total series limit {self.max_series_total} reached")
        self._per_metric[metric] = held + 1
        self._state[key] = state
        return state


def attributes(kvs: Iterable) -> tuple:
    """OTLP ``KeyValue`` list -> Snapshot attributes (plain str/bool/int/float values)."""
    return tuple((kv.key, _any(kv.value)) for kv in kvs)


def _any(value):
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if which == "array_value":
        return "[" + ",".join(str(_any(v)) for v in value.array_value.values) + "]"
    if which == "kvlist_value":
        return "{" + ",".join(f"{k}={v}" for k, v in attributes(value.kvlist_value.values)) + "}"
    if which == "bytes_value":
        return value.bytes_value.hex()
    return ""


def _number(point) -> float:
    which = point.WhichOneof("value")
    if which == "as_double":
        return point.as_double
    if which == "as_int":
        return float(point.as_int)
    raise _Rejected("a number data point without a value")


def _reduce(description: str) -> StatReduce | str:
    known = _REDUCE_OF.get(description)
    if known is not None:
        return known
    if description.startswith(REDUCE_PREFIX):
        words = description[len(REDUCE_PREFIX) :].split()
        name = words[0] if words else ""
        if name == SCALAR:
            return SCALAR
        return _REDUCES.get(name, StatReduce.AVG_MIN_MAX)
    return StatReduce.AVG_MIN_MAX


def _explicit(point) -> HistogramState:
    bounds = tuple(point.explicit_bounds)
    buckets = tuple(point.bucket_counts)
    if bounds:
        if len(buckets) != len(bounds) + 1:
            raise _Rejected(f"{len(bounds)} bounds need {len(bounds) + 1} bucket counts")
        if not _increasing(bounds):
            raise _Rejected("histogram bounds are not finite and strictly increasing")
        if sum(buckets) != point.count:
            raise _Rejected(f"bucket counts sum to {sum(buckets)}, count is {point.count}")
    else:
        buckets = ()
    return HistogramState(
        point.start_time_unix_nano,
        point.count,
        _hist_sum(point),
        point.min if point.HasField("min") else None,
        point.max if point.HasField("max") else None,
        bounds,
        buckets,
    )


def _exponential(point) -> HistogramState:
    """Exponential buckets as explicit ones: bucket ``i`` covers ``(base**i, base**(i+1)]``.

    Buckets that floats cannot bound exactly (overflow, too fine a scale) are dropped;
    count, sum, min and max are kept.
    """
    try:
        bounds, counts = _exponential_buckets(point)
    except (OverflowError, ZeroDivisionError):
        bounds, counts = [], []
    if not _increasing(bounds) or sum(counts) != point.count:
        bounds, counts = [], []
    return HistogramState(
        point.start_time_unix_nano,
        point.count,
        _hist_sum(point),
        point.min if point.HasField("min") else None,
        point.max if point.HasField("max") else None,
        tuple(bounds),
        tuple(counts),
    )


def _exponential_buckets(point) -> tuple[list[float], list[int]]:
    base = 2.0 ** (2.0**-point.scale)
    bounds: list[float] = []
    counts: list[int] = []
    negative = list(point.negative.bucket_counts)
    if negative:
        top = point.negative.offset + len(negative)
        bounds.append(-(base**top))
        counts.append(0)
        for index in range(len(negative) - 1, -1, -1):
            bounds.append(-(base ** (point.negative.offset + index)))
            counts.append(negative[index])
    bounds.append(0.0)
    counts.append(point.zero_count)
    positive = list(point.positive.bucket_counts)
    if positive:
        bounds.append(base**point.positive.offset)
        counts.append(0)
        for index, count in enumerate(positive):
            bounds.append(base ** (point.positive.offset + index + 1))
            counts.append(count)
    counts.append(0)
    return bounds, counts


def _increasing(bounds: Iterable[float]) -> bool:
    """True when ``bounds`` are finite and strictly increasing."""
    values = list(bounds)
    return all(map(math.isfinite, values)) and all(lo < hi for lo, hi in itertools.pairwise(values))


def _hist_sum(point) -> float:
    if not point.HasField("sum"):
        return math.nan if point.count else 0.0
    if not math.isfinite(point.sum):
        raise _Rejected(f"histogram sum {point.sum!r} is not finite")
    return point.sum


def _step(values: dict[str, int]) -> Step | None:
    if "global_step" not in values:
        return None
    return Step(values.get("epoch", 0), values.get("epoch_step", 0), values["global_step"])
