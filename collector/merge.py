"""Merge the rollout/eval windows of many workers and attach them to the next training step.

AReaL's RolloutController rule, applied to the windows the collector decoded (each worker's
cumulative series already turned into deltas by :mod:`telemetry.otlp.temporality`): for every
key, ``sum(value * count) / sum(count)`` over all workers and windows since the last
training step. Per point type:

- scalar-stream ``Gauge`` (``count`` set): count-weighted mean, count = total count;
- ``Histogram``: counts and sums added (so ``avg`` is count-weighted), min of mins, max of
  maxes, buckets added where every window has the same bounds;
- ``Counter``: each worker's latest cumulative total, summed over workers;
- ``Gauge`` without count: mean over the workers' latest values in the window.

A training snapshot with a new ``global_step`` (higher than any seen) closes the window:
the merged points are emitted as one Snapshot per stream with that step, for the
step-based sinks (W&B, SwanLab, TensorBoard, console). :meth:`RolloutMerger.flush` emits
what is pending at shutdown with the last step seen.

A sender's own health points (``rltel/otlp/...``: its transport's queue, retries, drops)
describe one process, not the rollout: they reach Prometheus per worker and are not merged
(merged, they would also collide with the trainer's keys of the same name in one W&B row).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from telemetry.model import names
from telemetry.model.snapshot import (
    Attributes,
    Counter,
    Gauge,
    Histogram,
    Snapshot,
    StatReduce,
    Step,
)

RUN_ATTRIBUTES = (names.EXPERIMENT, names.TRIAL)
PER_PROCESS_PREFIX = "rltel/"  # a sender's own health (rltel/otlp/...): never merged


@dataclass(slots=True)
class _Window:
    """What one key accumulated since the last training step."""

    kind: str
    metric: str
    unit: str
    attributes: Attributes
    count: int = 0
    sum: float = 0.0
    min: float | None = None
    max: float | None = None
    bounds: tuple[float, ...] | None = None
    buckets: list[int] | None = None
    reduce: StatReduce = StatReduce.AVG_MIN_MAX
    latest: dict = field(default_factory=dict)


class RolloutMerger:
    """Count-weighted merge of one run's rollout/eval streams, released per training step.

    Thread-safe. Memory is one small record per key per stream (plus, for counters and
    plain gauges, one value per worker).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, dict[tuple, _Window]] = {}
        self._totals: dict[tuple, dict[Attributes, Counter]] = {}
        self._step: Step | None = None
        self._resource: Attributes = ()
        self._latest_ns = 0

    @property
    def step(self) -> Step | None:
        """The highest training step seen."""
        return self._step

    def add(self, snapshot: Snapshot) -> None:
        """Accumulate one worker's decoded rollout/eval window (``snapshot.stream``)."""
        worker = snapshot.resource
        with self._lock:
            if not self._resource:
                self._resource = _run_resource(snapshot.resource)
            self._latest_ns = max(self._latest_ns, snapshot.time_unix_nano)
            windows = self._windows.setdefault(snapshot.stream, {})
            for point in snapshot.points:
                if point.metric.startswith(PER_PROCESS_PREFIX):
                    continue
                kind = _kind(point)
                key = (kind, point.metric, point.attributes)
                window = windows.get(key)
                if window is None:
                    window = windows[key] = _Window(
                        kind, point.metric, point.unit, point.attributes
                    )
                _accumulate(window, point, worker)
                if kind == "counter":
                    totals = self._totals.setdefault((snapshot.stream, key), {})
                    totals[worker] = point

    def on_train(self, snapshot: Snapshot) -> list[Snapshot]:
        """Note a training snapshot; on a new step, return the merged windows for it."""
        step = snapshot.step
        with self._lock:
            if not self._resource:
                self._resource = _run_resource(snapshot.resource)
            if step is None or (
                self._step is not None and step.global_step <= self._step.global_step
            ):
                return []
            self._step = step
            return self._release(step)

    def flush(self) -> list[Snapshot]:
        """The pending windows, attached to the last step seen (None if there was none)."""
        with self._lock:
            return self._release(self._step)

    def _release(self, step: Step | None) -> list[Snapshot]:
        out = []
        for stream, windows in self._windows.items():
            points = [self._point(stream, key, window) for key, window in windows.items()]
            points = [p for p in points if p is not None]
            if points:
                resource = (*self._resource, (names.ROLE, stream), (names.STREAM, stream))
                out.append(Snapshot(tuple(points), step, resource, self._latest_ns, stream))
        self._windows = {}
        return out

    def _point(self, stream: str, key: tuple, w: _Window):
        if w.kind == "scalar":
            if w.count <= 0:
                return None
            return Gauge(w.metric, w.sum / w.count, w.count, w.unit, w.attributes)
        if w.kind == "histogram":
            kept = w.buckets is not None
            return Histogram(
                w.metric,
                w.count,
                w.sum,
                w.min if w.count else None,
                w.max if w.count else None,
                w.bounds if kept else (),
                tuple(w.buckets) if kept else (),
                w.reduce,
                w.unit,
                w.attributes,
            )
        if w.kind == "counter":
            totals = self._totals[(stream, key)].values()
            start = min(c.start_time_unix_nano for c in totals)
            value = sum(c.value for c in totals)
            return Counter(w.metric, value, w.unit, w.attributes, start)
        values = list(w.latest.values())
        return Gauge(w.metric, sum(values) / len(values), None, w.unit, w.attributes)


def _kind(point) -> str:
    if isinstance(point, Histogram):
        return "histogram"
    if isinstance(point, Counter):
        return "counter"
    return "scalar" if point.count is not None else "gauge"


def _accumulate(window: _Window, point, worker: Attributes) -> None:
    kind = window.kind
    if kind == "scalar":
        window.count += point.count
        window.sum += point.value * point.count
    elif kind == "histogram":
        window.reduce = point.reduce
        window.count += point.count
        window.sum += point.sum
        window.min = _pick(window.min, point.min, min)
        window.max = _pick(window.max, point.max, max)
        _add_buckets(window, point)
    elif kind == "gauge":
        window.latest[worker] = point.value


def _add_buckets(window: _Window, point: Histogram) -> None:
    if window.bounds is None:
        window.bounds = point.bounds
        window.buckets = list(point.bucket_counts) if point.bounds else None
    elif window.buckets is not None and window.bounds == point.bounds and point.bounds:
        window.buckets = [a + b for a, b in zip(window.buckets, point.bucket_counts)]
    else:
        window.buckets = None  # differing bounds: keep count/sum/min/max only


def _pick(current: float | None, new: float | None, choose) -> float | None:
    if new is None:
        return current
    return new if current is None else choose(current, new)


def _run_resource(resource: Attributes) -> Attributes:
    return tuple((k, v) for k, v in resource if k in RUN_ATTRIBUTES)
