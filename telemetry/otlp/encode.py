"""Snapshot -> OTLP: the pure encoder of the wire contract, built on the OTel SDK's data classes.

Mapping (one Snapshot becomes one or more ``MetricsData``, each one OTLP request):

- ``Histogram`` -> OTel Histogram, DELTA, count/sum/min/max (min/max unset when count is 0)
  and explicit bounds/bucket counts when present; description ``rltel.reduce=<reduce>``.
- ``ScalarMean`` (a scalar stream) -> OTel Histogram without buckets, count and
  ``sum = value * count``, description ``rltel.reduce=scalar``; DELTA for trainer exports,
  CUMULATIVE (running totals since the worker's start) for rollout/eval workers.
- ``Gauge`` -> OTel Gauge. ``Counter`` -> monotonic CUMULATIVE Sum.
- Every request carries the step as gauges ``train.step``, ``train.epoch``,
  ``train.epoch_step`` with the snapshot's timestamp; the step is never an attribute.
- Resource = the snapshot's resource attributes plus ``rltel.stream``.

Every value and attribute is cast to a plain Python type first: the SDK encoder writes
numpy integers as doubles and drops numpy/torch attribute values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import replace

from opentelemetry.sdk.metrics import export as otel
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from telemetry.model import names
from telemetry.model.snapshot import (
    Counter,
    Gauge,
    Histogram,
    Point,
    ScalarMean,
    Snapshot,
    StatReduce,
)
from telemetry.otlp import wire
from telemetry.otlp.batch import Batch, plain_attribute

__all__ = [
    "Batch",
    "count_nonfinite",
    "encode",
    "encode_batch",
    "plain_attribute",
    "split",
]

SCOPE = InstrumentationScope("rltel", "0.1.0")
_SCALAR = wire.description(StatReduce.SCALAR)


def split(batch: Batch, max_points: int) -> list[Batch]:
    """Cut ``batch`` into batches of at most ``max_points`` data points per request.

    The step gauges every request carries count towards the limit.

    Raises:
        ValueError: ``max_points`` leaves no room for a data point beside the step gauges.
    """
    overhead = len(wire.STEP_METRICS) if batch.snapshot.step is not None else 0
    room = max_points - overhead
    if room < 1:
        raise ValueError(f"max_points must be > {overhead}, got {max_points}")
    points = batch.snapshot.points
    if len(points) <= room:
        return [batch]
    return [
        replace(batch, snapshot=replace(batch.snapshot, points=points[i : i + room]))
        for i in range(0, len(points), room)
    ]


def encode(
    snapshot: Snapshot,
    *,
    window_start_unix_nano: int = 0,
    start_unix_nano: int = 0,
    cumulative_scalars: bool = False,
    max_points: int = 5000,
) -> list[MetricsData]:
    """Encode ``snapshot`` as one ``MetricsData`` per request of at most ``max_points`` points.

    Args:
        snapshot: the export to encode.
        window_start_unix_nano: start of the window of the DELTA points.
        start_unix_nano: process start (Counters without a start, cumulative scalars).
        cumulative_scalars: scalar streams hold running totals (rollout/eval workers).
        max_points: data points per request, the step gauges included.

    Raises:
        ValueError: ``max_points`` is too small to hold the step gauges and one point.
    """
    batch = Batch(snapshot, window_start_unix_nano, start_unix_nano, cumulative_scalars)
    return [encode_batch(part) for part in split(batch, max_points)]


def encode_batch(batch: Batch) -> MetricsData:
    """Encode one batch (already split) as one ``MetricsData``."""
    snapshot = batch.snapshot
    now = int(snapshot.time_unix_nano)
    metrics: dict[tuple, list] = {}
    for point in snapshot.points:
        kind, description, data_point = _data_point(point, batch, now)
        metrics.setdefault((kind, point.metric, point.unit, description), []).append(data_point)
    out = [_metric(key, points, batch) for key, points in metrics.items()]
    if snapshot.step is not None:
        step = snapshot.step
        values = (step.global_step, step.epoch, step.epoch_step)
        for name, value in zip(wire.STEP_METRICS, values, strict=True):
            data_point = NumberDataPoint({}, 0, now, int(value))
            out.append(Metric(name, "", "", otel.Gauge([data_point])))
    resource = {name: plain_attribute(value) for name, value in snapshot.resource}
    resource[names.STREAM] = str(snapshot.stream)
    scope_metrics = ScopeMetrics(SCOPE, out, "")
    return MetricsData([ResourceMetrics(Resource(resource), [scope_metrics], "")])


def _data_point(point: Point, batch: Batch, now: int):
    attributes = {str(name): plain_attribute(value) for name, value in point.attributes}
    if isinstance(point, Histogram):
        count = int(point.count)
        empty = count <= 0
        return (
            "histogram",
            wire.description(point.reduce),
            HistogramDataPoint(
                attributes=attributes,
                start_time_unix_nano=int(batch.window_start_unix_nano),
                time_unix_nano=now,
                count=count,
                sum=float(point.sum),
                bucket_counts=[int(c) for c in point.bucket_counts],
                explicit_bounds=[float(b) for b in point.bounds],
                min=None if empty or point.min is None else float(point.min),
                max=None if empty or point.max is None else float(point.max),
            ),
        )
    if isinstance(point, Counter):
        start = int(point.start_time_unix_nano) or int(batch.start_unix_nano)
        return "sum", "", NumberDataPoint(attributes, start, now, float(point.value))
    if isinstance(point, ScalarMean):
        count = int(point.count)
        start = batch.start_unix_nano if batch.cumulative_scalars else batch.window_start_unix_nano
        return (
            "scalar",
            _SCALAR,
            HistogramDataPoint(
                attributes=attributes,
                start_time_unix_nano=int(start),
                time_unix_nano=now,
                count=count,
                sum=float(point.value) * count,
                bucket_counts=[],
                explicit_bounds=[],
                min=None,
                max=None,
            ),
        )
    if isinstance(point, Gauge):
        return "gauge", "", NumberDataPoint(attributes, 0, now, float(point.value))
    raise TypeError(f"{getattr(point, 'metric', point)!r}: not a point: {type(point).__name__}")


def _metric(key: tuple, points: list, batch: Batch) -> Metric:
    kind, name, unit, description = key
    if kind == "histogram":
        data = otel.Histogram(points, AggregationTemporality.DELTA)
    elif kind == "scalar":
        temporality = (
            AggregationTemporality.CUMULATIVE
            if batch.cumulative_scalars
            else AggregationTemporality.DELTA
        )
        data = otel.Histogram(points, temporality)
    elif kind == "sum":
        data = Sum(points, AggregationTemporality.CUMULATIVE, True)
    else:
        data = otel.Gauge(points)
    return Metric(str(name), description, str(unit), data)


def count_nonfinite(points: Iterable[Point]) -> int:
    """Non-finite values among ``points``: gauge/counter values, histogram sum/min/max."""
    return sum(not math.isfinite(value) for value in _values(points))


def _values(points: Iterable[Point]) -> Iterator[float]:
    for point in points:
        if isinstance(point, Histogram):
            yield float(point.sum)
            for value in (point.min, point.max):
                if value is not None:
                    yield float(value)
        else:
            yield float(point.value)
