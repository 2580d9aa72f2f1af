"""OTLP ``ExportMetricsServiceRequest`` -> Snapshots, for rltel's encoder and any OTel sender.

One Snapshot per ``ResourceMetrics``; each data point is mapped by its metric kind
(:mod:`telemetry.otlp.mapping`, which holds the table). Gauges ``train.step``,
``train.epoch``, ``train.epoch_step`` become ``Snapshot.step``; resource attribute
``rltel.stream`` becomes ``Snapshot.stream``. Points that cannot be mapped (no value, a
negative monotonic sum, inconsistent buckets, a series past its limit, a name or
attribute over its limit) are counted as rejected with a reason, never raised.

A request is read once before it is decoded (:meth:`Decoder.read`: each resource's
attributes, and its number of data points counted without reading them), so that the
collector can bound it and open its runs first, and the decoder reuses what was read.

The per-series temporality state (the baselines of cumulative series, the running totals of
delta sums) can be kept across a restart: :meth:`Decoder.export_state` reads it out,
:meth:`Decoder.restore_state` puts it back, and :attr:`Decoder.on_commit` is told what each
request changed; the collector owns the files (:mod:`collector.baselines`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import ResourceMetrics

from telemetry.model import names
from telemetry.model.snapshot import Attributes, Point, Snapshot, Step
from telemetry.otlp.mapping import DELTA, PointMapper
from telemetry.otlp.series import SeriesState, SeriesTable
from telemetry.otlp.values import LabelLimits, OverLimit, Rejected, attributes

__all__ = ["DecodeResult", "Decoder", "Request", "RequestResource", "Staged"]

NO_RECORDED_VALUE = 1
MAX_REASONS = 5


@dataclass(frozen=True, slots=True)
class RequestResource:
    """One ``ResourceMetrics`` as read before decoding.

    Attributes:
        message: the ``ResourceMetrics`` itself.
        attributes: its resource attributes; ``()`` when they are over a label limit.
        over_limit: the label limit its attributes are over, if any (its points are rejected).
    """

    message: ResourceMetrics
    attributes: Attributes
    over_limit: OverLimit | None


class Request:
    """An ``ExportMetricsServiceRequest`` read once: its resources and its data points."""

    __slots__ = ("_points", "resources")

    def __init__(self, resources: tuple[RequestResource, ...]) -> None:
        self.resources = resources
        self._points: int | None = None

    @property
    def points(self) -> int:
        """Its data points, counted on first use without reading them."""
        if self._points is None:
            self._points = sum(_data_points(resource.message) for resource in self.resources)
        return self._points


def _data_points(rm: ResourceMetrics) -> int:
    """The data points of one ``ResourceMetrics``, counted without reading them."""
    points = 0
    for scope_metrics in rm.scope_metrics:
        for metric in scope_metrics.metrics:
            kind = metric.WhichOneof("data")
            if kind is not None:
                points += len(getattr(metric, kind).data_points)
    return points


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """The snapshots of one request and what could not be mapped."""

    snapshots: tuple[Snapshot, ...]
    accepted: int
    rejected: int
    reasons: tuple[str, ...] = ()
    over_limit: tuple[tuple[str, int], ...] = ()  # (LabelLimits field, points rejected)

    @property
    def message(self) -> str:
        """A one-line summary of the rejections for ``partial_success.error_message``."""
        if not self.rejected:
            return ""
        return f"rejected {self.rejected} data points: " + "; ".join(self.reasons)


@dataclass(frozen=True, slots=True)
class Staged:
    """A decoded request whose temporality changes wait for ``commit()``."""

    result: DecodeResult
    commit: Callable[[], None]


class Decoder:
    """Decodes requests into Snapshots, keeping the per-series temporality state.

    Args:
        max_series_per_metric: stateful series (cumulative histograms, delta sums) kept
            per metric name; points of further series are rejected.
        max_series_total: stateful series kept over all metrics.
        started_ns: the collector's start (epoch ns); see :mod:`telemetry.otlp.temporality`.
        label_limits: bounds on metric names and attributes; points over them are rejected.

    Thread-safe: concurrent ``decode`` calls share the state under one lock.
    :meth:`stage` decodes without changing the state until the caller commits, so a
    request refused after decoding leaves no trace (a retried delta is not counted twice).

    Attributes:
        on_commit: if set, called with the series a request changed (key -> new state)
            when the block of a committed :meth:`stage` ends, under the decoder's lock: in
            commit order, after the caller queued (and journaled) the request's snapshots.
            It must not raise.
    """

    def __init__(
        self,
        max_series_per_metric: int = 2000,
        max_series_total: int = 100_000,
        started_ns: int | None = None,
        label_limits: LabelLimits | None = None,
    ) -> None:
        self.label_limits = label_limits or LabelLimits()
        self._over: dict[str, int] = {}
        self.max_series_per_metric = max_series_per_metric
        self.max_series_total = max_series_total
        self.started_ns = time.time_ns() if started_ns is None else started_ns
        self._lock = threading.Lock()
        self._series = SeriesTable(max_series_per_metric, max_series_total)
        self._points = PointMapper(self.label_limits, self._series, self.started_ns)
        self.on_commit: Callable[[dict[tuple, SeriesState]], None] | None = None

    @property
    def series(self) -> int:
        """Stateful series currently tracked."""
        return len(self._series)

    def export_state(self) -> tuple[int, list[tuple[tuple, SeriesState]]]:
        """``(started_ns, series)``: the start and every kept series' state, for
        :meth:`restore_state` in a later process."""
        with self._lock:
            return self.started_ns, self._series.items()

    def restore_state(self, started_ns: int, series: list[tuple[tuple, SeriesState]]) -> int:
        """Take up the state :meth:`export_state` gave (before any request); returns the
        series left out (past this decoder's series limits).

        ``started_ns`` becomes the start if it is earlier: a series that started after it and
        has no kept state was never acknowledged, so its first point is a window of its own.
        """
        with self._lock:
            self.started_ns = min(self.started_ns, started_ns)
            self._points.started_ns = self.started_ns
            return self._series.restore(series)

    def read(self, message: ExportMetricsServiceRequest) -> Request:
        """``message``'s resources, their attributes checked against the label limits, read
        once for :meth:`stage`; never raises for bad data."""
        return Request(tuple(self._read(rm) for rm in message.resource_metrics))

    def decode(self, message: ExportMetricsServiceRequest) -> DecodeResult:
        """Map every data point of ``message`` and keep its state; never raises for bad data."""
        with self.stage(self.read(message)) as staged:
            staged.commit()
        return staged.result

    @contextlib.contextmanager
    def stage(self, request: Request) -> Iterator[Staged]:
        """Decode ``request`` (from :meth:`read`) under the decoder's lock, held until the
        block ends.

        The temporality state changes only if ``commit()`` is called inside the block;
        other requests wait meanwhile, so admit (or refuse) quickly.
        """
        with self._lock:
            self._series.discard()
            self._over = {}
            changed: list[dict[tuple, SeriesState]] = []
            try:
                snapshots: list[Snapshot] = []
                counts = [0, 0]
                reasons: dict[str, None] = {}
                for resource in request.resources:
                    snapshots.append(self._resource(resource, counts, reasons))
                result = DecodeResult(
                    tuple(snapshots),
                    counts[0],
                    counts[1],
                    tuple(reasons)[:MAX_REASONS],
                    tuple(self._over.items()),
                )
                yield Staged(result, lambda: changed.append(self._series.commit()))
            finally:
                self._series.discard()
                if changed and changed[0] and self.on_commit is not None:
                    self.on_commit(changed[0])

    def _over_limit(self, exc: OverLimit, n: int, counts: list[int], reasons, what: str) -> None:
        counts[1] += n
        self._over[exc.limit] = self._over.get(exc.limit, 0) + n
        if len(reasons) < MAX_REASONS:
            reasons[f"{what}: {exc}"] = None

    def _read(self, rm: ResourceMetrics) -> RequestResource:
        try:
            return RequestResource(rm, attributes(rm.resource.attributes, self.label_limits), None)
        except OverLimit as exc:
            return RequestResource(rm, (), exc)

    def _resource(
        self, read: RequestResource, counts: list[int], reasons: dict[str, None]
    ) -> Snapshot:
        if read.over_limit is not None:
            n = _data_points(read.message)
            self._over_limit(read.over_limit, n, counts, reasons, "resource")
            return Snapshot(points=())
        limits, rm, resource = self.label_limits, read.message, read.attributes
        points: list[Point] = []
        step: dict[str, int] = {}
        latest = accepted = 0
        handlers = self._points.handlers
        delta_histogram = self._points.delta_histogram
        for scope_metrics in rm.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                name = metric.name
                if kind is None or not name:
                    counts[1] += 1
                    reasons["a metric without a name or data"] = None
                    continue
                data = getattr(metric, kind)
                if len(name) > limits.max_metric_name_length:
                    exc = OverLimit(
                        "max_metric_name_length",
                        f"metric name of {len(name)} characters; max_metric_name_length is "
                        f"{limits.max_metric_name_length}",
                    )
                    self._over_limit(exc, len(data.data_points), counts, reasons, repr(name[:64]))
                    continue
                if kind == "histogram" and data.aggregation_temporality == DELTA:
                    handle = delta_histogram
                else:
                    handle = handlers[kind]
                # upb containers have no __iter__: iterating one ends in an IndexError;
                # a slice is a plain list
                for point in data.data_points[:]:
                    time_unix_nano = point.time_unix_nano
                    if time_unix_nano > latest:
                        latest = time_unix_nano
                    accepted += 1
                    if point.flags & NO_RECORDED_VALUE:
                        continue  # an explicit "no value": accepted, nothing to show
                    try:
                        handle(metric, name, data, point, points, step, resource)
                    except OverLimit as exc:
                        accepted -= 1
                        self._over_limit(exc, 1, counts, reasons, repr(name))
                    except Rejected as exc:
                        accepted -= 1
                        counts[1] += 1
                        if len(reasons) < MAX_REASONS:
                            reasons[f"{name!r}: {exc}"] = None
        counts[0] += accepted
        res = dict(resource)
        stream = res.get(names.STREAM) or (
            res[names.ROLE] if res.get(names.ROLE) in ("rollout", "eval") else "train"
        )
        return Snapshot(
            points=tuple(points),
            step=_step(step),
            resource=resource,
            time_unix_nano=latest,
            stream=str(stream),
        )


def _step(values: dict[str, int]) -> Step | None:
    if "global_step" not in values:
        return None
    return Step(values.get("epoch", 0), values.get("epoch_step", 0), values["global_step"])
