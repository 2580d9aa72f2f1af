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

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from telemetry.model import names
from telemetry.model.snapshot import Counter, Gauge, Histogram, Point, Snapshot, StatReduce, Step
from telemetry.otlp.fast_points import trusted_counter, trusted_gauge, trusted_histogram
from telemetry.otlp.temporality import HistogramState, SumState, histogram_window
from telemetry.otlp.values import (
    LabelLimits,
    OverLimit,
    Rejected,
    attributes,
    explicit,
    exponential,
    number,
)

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
    """

    def __init__(
        self,
        max_series_per_metric: int = 2000,
        max_series_total: int = 100_000,
        started_ns: int | None = None,
        label_limits: LabelLimits | None = None,
    ) -> None:
        self.label_limits = label_limits or LabelLimits()
        self.label_limits.validate()
        self._over: dict[str, int] = {}
        self.max_series_per_metric = max_series_per_metric
        self.max_series_total = max_series_total
        self.started_ns = time.time_ns() if started_ns is None else started_ns
        self._lock = threading.Lock()
        self._state: dict[tuple, HistogramState | SumState] = {}
        self._per_metric: dict[str, int] = {}
        self._overlay: dict[tuple, HistogramState | SumState] = {}  # staged changes
        self._added: dict[str, int] = {}  # staged new series per metric
        self._new = 0  # staged new series
        self._handlers = {
            "gauge": self._gauge,
            "sum": self._sum,
            "histogram": self._explicit_histogram,
            "exponential_histogram": self._exponential_histogram,
            "summary": self._summary,
        }

    @property
    def series(self) -> int:
        """Stateful series currently tracked."""
        return len(self._state)

    def decode(self, request: ExportMetricsServiceRequest) -> DecodeResult:
        """Map every data point of ``request`` and keep its state; never raises for bad data."""
        with self.stage(request) as staged:
            staged.commit()
        return staged.result

    @contextlib.contextmanager
    def stage(self, request: ExportMetricsServiceRequest) -> Iterator[Staged]:
        """Decode ``request`` under the decoder's lock, held until the block ends.

        The temporality state changes only if ``commit()`` is called inside the block;
        other requests wait meanwhile, so admit (or refuse) quickly.
        """
        with self._lock:
            self._overlay, self._added, self._new, self._over = {}, {}, 0, {}
            try:
                snapshots: list[Snapshot] = []
                counts = [0, 0]
                reasons: dict[str, None] = {}
                for resource_metrics in request.resource_metrics:
                    snapshots.append(self._resource(resource_metrics, counts, reasons))
                result = DecodeResult(
                    tuple(snapshots),
                    counts[0],
                    counts[1],
                    tuple(reasons)[:MAX_REASONS],
                    tuple(self._over.items()),
                )
                yield Staged(result, self._commit)
            finally:
                self._overlay, self._added, self._new = {}, {}, 0

    def _commit(self) -> None:
        self._state.update(self._overlay)
        for metric, n in self._added.items():
            self._per_metric[metric] = self._per_metric.get(metric, 0) + n
        self._overlay, self._added, self._new = {}, {}, 0

    def _get(self, key: tuple) -> HistogramState | SumState | None:
        staged = self._overlay.get(key)
        return staged if staged is not None else self._state.get(key)

    def _over_limit(self, exc: OverLimit, n: int, counts: list[int], reasons, what: str) -> None:
        counts[1] += n
        self._over[exc.limit] = self._over.get(exc.limit, 0) + n
        if len(reasons) < MAX_REASONS:
            reasons[f"{what}: {exc}"] = None

    def _resource(self, rm, counts: list[int], reasons: dict[str, None]) -> Snapshot:
        limits = self.label_limits
        try:
            resource = attributes(rm.resource.attributes, limits)
        except OverLimit as exc:
            n = sum(
                len(getattr(m, m.WhichOneof("data")).data_points)
                for sm in rm.scope_metrics
                for m in sm.metrics
                if m.WhichOneof("data") is not None
            )
            self._over_limit(exc, n, counts, reasons, "resource")
            return Snapshot(points=())
        points: list[Point] = []
        step: dict[str, int] = {}
        latest = accepted = 0
        handlers = self._handlers
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
                    handle = self._delta_histogram
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

    # Handlers: (metric, name, data, point, out, step, resource); each appends the points
    # of one data point to ``out`` (or the step to ``step``), or raises Rejected.

    def _gauge(self, metric, name: str, data, point, out: list, step: dict, resource) -> None:
        value = number(point)
        if name in STEP_GAUGES:
            if not math.isfinite(value):
                raise Rejected(f"step value {value!r} is not finite")
            step[STEP_GAUGES[name]] = int(value)
            return
        kvs = point.attributes
        attrs = attributes(kvs, self.label_limits) if kvs else ()
        out.append(trusted_gauge(name, value, None, metric.unit, attrs))

    def _sum(self, metric, name: str, data, point, out: list, step: dict, resource) -> None:
        value = number(point)
        kvs = point.attributes
        attrs = attributes(kvs, self.label_limits) if kvs else ()
        monotonic = data.is_monotonic
        if data.aggregation_temporality == DELTA:
            key = ("sum", resource, name, attrs)
            state = self._get(key)
            if state is None:
                state = self._remember(key, name, SumState(point.start_time_unix_nano, 0.0))
            if monotonic and value < 0:
                raise Rejected("negative delta in a monotonic sum")
            start = state.start_time_unix_nano
            value = state.total + value
            self._overlay[key] = SumState(start, value)
        else:
            start = point.start_time_unix_nano
        if not monotonic:
            out.append(trusted_gauge(name, value, None, metric.unit, attrs))
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
        reduce = _REDUCE_OF.get(description) or _reduce(description)
        count, total = point.count, point.sum
        if not math.isfinite(total):
            raise Rejected(f"histogram sum {total!r} is not finite")
        if reduce == SCALAR:
            if count > 0:
                out.append(trusted_gauge(name, total / count, count, metric.unit, attrs))
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
        reduce = _reduce(metric.description)
        if data.aggregation_temporality != DELTA:
            key = ("histogram", resource, name, attrs)
            previous = self._get(key)
            if previous is None:
                self._remember(key, name, current)
            else:
                self._overlay[key] = current
            window = histogram_window(previous, current, self.started_ns)
            if window is None:
                return
            current = window
        if reduce == SCALAR:
            if current.count > 0:
                value = current.sum / current.count
                out.append(Gauge(name, value, current.count, metric.unit, attrs))
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
            out.append(Gauge(name, quantile.value, None, metric.unit, labels))
        start = point.start_time_unix_nano
        out.append(Counter(name + "_count", float(point.count), "", attrs, start))
        if math.isfinite(point.sum) and point.sum >= 0:
            out.append(Counter(name + "_sum", point.sum, metric.unit, attrs, start))

    def _remember(self, key: tuple, metric: str, state):
        added = self._added.get(metric, 0)
        if self._per_metric.get(metric, 0) + added >= self.max_series_per_metric:
            raise Rejected(f"series limit {self.max_series_per_metric} reached")
        if len(self._state) + self._new >= self.max_series_total:
            raise Rejected(f"total series limit {self.max_series_total} reached")
        self._added[metric] = added + 1
        self._new += 1
        self._overlay[key] = state
        return state


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


def _step(values: dict[str, int]) -> Step | None:
    if "global_step" not in values:
        return None
    return Step(values.get("epoch", 0), values.get("epoch_step", 0), values["global_step"])
