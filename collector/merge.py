"""Merge the rollout/eval windows of many workers and attach them to the next training step.

AReaL's RolloutController rule, applied to the windows the collector decoded (each worker's
cumulative series already turned into deltas by :mod:`telemetry.otlp.temporality`): for every
key, ``sum(value * count) / sum(count)`` over all workers and windows since the last
training step. Per point type:

- ``ScalarMean`` (a scalar stream): count-weighted mean, count = total count;
- ``Histogram``: counts and sums added (so ``avg`` is count-weighted), min of mins, max of
  maxes, buckets added where every window has the same bounds;
- a NaN in one worker's window makes that step's merged value NaN: a sum with NaN is NaN,
  and a NaN min or max wins whatever the workers' order, as in the DP reduction; the next
  step merges afresh;
- ``Counter``: each worker's latest cumulative total, summed over workers;
- ``Gauge``: mean over the workers' latest values in the window.

A training snapshot with a new ``global_step`` (higher than any seen) closes the window:
the merged points are emitted as one Snapshot per stream with that step, for the
step-based sinks (W&B, SwanLab, TensorBoard, console). :meth:`RolloutMerger.flush` emits
what is pending at shutdown with the last step seen.

A sender's own health points (``rltel/otlp/...``: its transport's queue, retries, drops)
describe one process, not the rollout: they reach Prometheus per worker and are not merged
(merged, they would also collide with the trainer's keys of the same name in one W&B row).

A window equal to the worker's last one (same time, same points: a request retried after
its answer was lost) is counted in :attr:`RolloutMerger.duplicates` and not merged again.
With the collector's durable queue (:meth:`RolloutMerger.journal_to`) every window merged is
journaled first, and :meth:`RolloutMerger.checkpoint`, once the released windows are in the
sinks' journals, writes the merger's state (step, counter totals, each worker's last window)
and acknowledges the windows before it.

A checkpoint is one record per worker and stream: a Snapshot on the stream
``rltel.merge/<stream>`` with the worker's resource plus the digest of its last window
(``rltel.merge.digest``), that window's time, the merger's step, and the worker's latest
counter totals as its points. A new process reads the journal back in order: windows after
the last checkpoint are merged again, the checkpoint restores the step (a retried training
step releases nothing twice), the counter sums over workers, and each worker's last window
(its retried request is recognised as a duplicate).
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import dataclass, field

from exporters.journal import Journal, encoded
from telemetry.model import names
from telemetry.model.snapshot import (
    Attributes,
    Counter,
    Gauge,
    Histogram,
    ScalarMean,
    Snapshot,
    StatReduce,
    Step,
)

RUN_ATTRIBUTES = (names.EXPERIMENT, names.TRIAL)
PER_PROCESS_PREFIX = "rltel/"  # a sender's own health (rltel/otlp/...): never merged
CHECKPOINT_PREFIX = "rltel.merge/"  # a checkpoint record's stream: this + the window's
DIGEST = "rltel.merge.digest"  # a checkpoint's resource attribute: the last window's digest


@dataclass(slots=True)
class _MergedKey:
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
    plain gauges, one value per worker) and each worker's last window (to recognise a retry).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, dict[tuple, _MergedKey]] = {}
        self._totals: dict[tuple, dict[Attributes, Counter]] = {}
        self._step: Step | None = None
        self._resource: Attributes = ()
        self._latest_ns = 0
        # each worker's last window: its time, and itself (the digest of its record once
        # journaled: what a checkpoint keeps)
        self._last: dict[tuple[str, Attributes], tuple[int, Snapshot | str]] = {}
        self.duplicates = 0
        self.journal: Journal | None = None
        self._unsaved = False  # windows or a step not in a checkpoint yet

    @property
    def step(self) -> Step | None:
        """The highest training step seen."""
        return self._step

    def journal_to(self, journal: Journal) -> None:
        """Journal every window from now on in ``journal``, after merging again what an
        earlier process left there: its last checkpoint's state and the windows after it."""
        with self._lock:
            self.journal = journal
            pending, journal.pending = journal.pending, []
            for _, snapshot in pending:
                state = read_checkpoint(snapshot)
                if state is None:
                    self._merge(snapshot, _digest(snapshot))
                    continue
                self._windows = {}  # what came before a checkpoint was released
                self._restore(state)
            self._unsaved = bool(pending)

    @property
    def waiting(self) -> bool:
        """Some window waits for its training step."""
        with self._lock:
            return self._windows_wait()

    def _windows_wait(self) -> bool:
        """Some window waits for its training step (the caller holds the lock)."""
        return any(self._windows.values())

    @property
    def full(self) -> bool:
        """The journal holds its limit: windows are refused until the next training step."""
        return self.journal is not None and self.journal.full

    def add(self, snapshot: Snapshot) -> bool:
        """Accumulate one worker's decoded rollout/eval window (``snapshot.stream``); False
        for a duplicate of the worker's last window (counted, not merged)."""
        with self._lock:
            if self._repeats(snapshot):
                self.duplicates += 1
                return False
            kept: Snapshot | str = snapshot
            if self.journal is not None:
                self.journal.append(snapshot)  # a failed write refuses the request (sync)
                self._unsaved = True
                kept = _digest(snapshot)  # of the record just encoded: cheap
            self._merge(snapshot, kept)
            return True

    def _repeats(self, snapshot: Snapshot) -> bool:
        """``snapshot`` equals its worker's last window (compared only at the same time; a
        sender that sets no time is never taken for a retry)."""
        last = self._last.get((snapshot.stream, snapshot.resource))
        if last is None or not snapshot.time_unix_nano or last[0] != snapshot.time_unix_nano:
            return False
        kept = last[1]
        if isinstance(kept, str):
            return kept == _digest(snapshot)
        # a NaN equals nothing, so points holding one are compared by their records
        return kept.points == snapshot.points or _digest(kept) == _digest(snapshot)

    def _merge(self, snapshot: Snapshot, kept: Snapshot | str) -> None:
        worker = snapshot.resource
        if not self._resource:
            self._resource = _run_resource(snapshot.resource)
        self._latest_ns = max(self._latest_ns, snapshot.time_unix_nano)
        self._last[(snapshot.stream, worker)] = (snapshot.time_unix_nano, kept)
        windows = self._windows.setdefault(snapshot.stream, {})
        for point in snapshot.points:
            if point.metric.startswith(PER_PROCESS_PREFIX):
                continue
            kind = _kind(point)
            key = (kind, point.metric, point.attributes)
            window = windows.get(key)
            if window is None:
                window = windows[key] = _MergedKey(kind, point.metric, point.unit, point.attributes)
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
            self._unsaved = self._unsaved or bool(self._last)
            return self._release(step)

    def flush(self) -> list[Snapshot]:
        """The pending windows, attached to the last step seen (None if there was none)."""
        with self._lock:
            return self._release(self._step)

    def checkpoint(self, final: bool = False) -> None:
        """Once the released windows are queued for the sinks (in their journals): write the
        merger's state and acknowledge every window journaled before it. Nothing is written
        while windows wait for their step: only a release (or ``final``) ends a journal span.

        Args:
            final: a clean shutdown: acknowledge the state too (the journal empties).
        """
        with self._lock:
            journal = self.journal
            if journal is None or not (self._unsaved or final):
                return
            if not final and self._windows_wait():
                # windows wait for their step (this training snapshot released nothing: a
                # retried step, the closed marker): a checkpoint now would acknowledge their
                # records, and a restart would take them for released
                return
            first = None
            if self._unsaved:
                for (stream, worker), (time_ns, kept) in self._last.items():
                    digest = kept if isinstance(kept, str) else _digest(kept)
                    counters = tuple(
                        totals[worker]
                        for (s, _), totals in self._totals.items()
                        if s == stream and worker in totals
                    )
                    state = _WorkerState(stream, worker, time_ns, digest, self._step, counters)
                    seq = journal.append(state.record())
                    if seq is None:
                        return  # the write failed: the request is refused (sync), no ack
                    first = seq if first is None else first
                self._unsaved = False
            if final:
                journal.ack(journal.last_seq)
            elif first is not None:
                journal.ack(first - 1)

    def _restore(self, state: _WorkerState) -> None:
        """Take one worker's part of a checkpoint (replay)."""
        worker = state.worker
        if not self._resource:
            self._resource = _run_resource(worker)
        self._latest_ns = max(self._latest_ns, state.time_unix_nano)
        self._last[(state.stream, worker)] = (state.time_unix_nano, state.digest)
        for point in state.counters:
            key = ("counter", point.metric, point.attributes)
            self._totals.setdefault((state.stream, key), {})[worker] = point
        step = state.step
        if step is not None and (self._step is None or step.global_step > self._step.global_step):
            self._step = step

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

    def _point(self, stream: str, key: tuple, w: _MergedKey):
        if w.kind == "scalar":
            if w.count <= 0:
                return None
            return ScalarMean(w.metric, w.sum / w.count, w.count, w.unit, w.attributes)
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
        return Gauge(w.metric, sum(values) / len(values), unit=w.unit, attributes=w.attributes)


def _kind(point) -> str:
    if isinstance(point, Histogram):
        return "histogram"
    if isinstance(point, Counter):
        return "counter"
    if isinstance(point, ScalarMean):
        return "scalar"
    return "gauge"


def _accumulate(window: _MergedKey, point, worker: Attributes) -> None:
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


def _add_buckets(window: _MergedKey, point: Histogram) -> None:
    if window.bounds is None:
        window.bounds = point.bounds
        window.buckets = list(point.bucket_counts) if point.bounds else None
    elif window.buckets is not None and window.bounds == point.bounds and point.bounds:
        window.buckets = [a + b for a, b in zip(window.buckets, point.bucket_counts)]
    else:
        window.buckets = None  # differing bounds: keep count/sum/min/max only


def _pick(current: float | None, new: float | None, choose) -> float | None:
    """``choose`` of the two, None ignored; a NaN wins (as in the DP reduction)."""
    if new is None or (current is not None and math.isnan(current)):
        return current
    if current is None or math.isnan(new):
        return new
    return choose(current, new)


def _digest(snapshot: Snapshot) -> str:
    """A digest of a window's journal record, the same in every process (a retry's is
    equal); the record is encoded once for the journal and the digest."""
    return hashlib.blake2b(encoded(snapshot), digest_size=12).hexdigest()


def _run_resource(resource: Attributes) -> Attributes:
    return tuple((k, v) for k, v in resource if k in RUN_ATTRIBUTES)


@dataclass(frozen=True, slots=True)
class _WorkerState:
    """One worker's part of a checkpoint."""

    stream: str
    worker: Attributes
    time_unix_nano: int
    digest: str
    step: Step | None
    counters: tuple[Counter, ...]

    def record(self) -> Snapshot:
        """This part as a journal record."""
        resource = (*self.worker, (DIGEST, self.digest))
        return Snapshot(
            self.counters, self.step, resource, self.time_unix_nano, CHECKPOINT_PREFIX + self.stream
        )


def read_checkpoint(snapshot: Snapshot) -> _WorkerState | None:
    """The checkpoint part a journal record holds; None for a window."""
    if not snapshot.stream.startswith(CHECKPOINT_PREFIX):
        return None
    worker = tuple((k, v) for k, v in snapshot.resource if k != DIGEST)
    digest = str(snapshot.resource_value(DIGEST, ""))
    counters = tuple(p for p in snapshot.points if isinstance(p, Counter))
    return _WorkerState(
        snapshot.stream.removeprefix(CHECKPOINT_PREFIX),
        worker,
        snapshot.time_unix_nano,
        digest,
        snapshot.step,
        counters,
    )
