"""The OTLP sink: Snapshots to an OTLP/gRPC endpoint (the rltel collector), spool as overflow.

It runs behind a :class:`~exporters.queued.QueuedSink` like every sink, with its own
:class:`~exporters.base.Delivery` policy (``otlp.queue_size``, jittered backoff, spill once
failures last). Exporting a snapshot builds its wire form on the queue's thread: rollout
and eval scalar streams become running totals since the start (a lost request loses
nothing: the collector diffs them back to windows), the sink's own health points ride
along, and the window starts at the previous snapshot. The batch is cut into requests of
at most ``max_points_per_request``; a retry resumes at the first request not delivered.

A snapshot's samples go as one logs request after its metric requests. Trace requests
(:class:`~exporters.otlp.signal_requests.SignalRequest`) share the queue:
:meth:`OtlpSink.span_exporter` gives the OpenTelemetry ``SpanExporter`` that queues them;
they are retried, spooled and replayed in order with the metrics.

The :class:`~exporters.otlp.spool.Spool` is the queue's overflow
(:class:`~exporters.otlp.overflow.SpoolOverflow`): from the first failed request (and
whenever the queue fills past half), the snapshot in hand and everything queued go to disk
in order. From then on, while the endpoint stays down, ``submit`` (``commit``'s thread)
writes each snapshot to the spool itself, behind anything still queued, before it returns:
a process killed during an outage loses no snapshot it submitted after that first spill
(what is submitted before the first failure is known waits in memory). Requests are
replayed from disk, before anything queued later, once the endpoint is back (a spool left
by an earlier process first, from this process's start, whether it commits or not);
``rltel spool flush`` replays a spool without a process that commits
(:mod:`exporters.otlp.flush`). At close the queue keeps retrying until its deadline
and spools only what is left then. Beyond the spool's limit points are dropped and counted.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from exporters.base import Delivery, ExportResult, Sink
from exporters.otlp.overflow import SpoolOverflow, down_hint
from exporters.otlp.signal_requests import (
    ITEM_NAMES,
    QueueSpanExporter,
    SignalRequest,
    logs_request,
)
from exporters.otlp.spool import Part, Spool
from exporters.otlp.transport import OtlpSender
from telemetry.config import OtlpTlsConfig
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Counter, Gauge, Point, ScalarMean, Snapshot
from telemetry.otlp.encode import Batch, count_nonfinite, split

__all__ = ["HEALTH_COUNTERS", "HEALTH_POINTS", "OtlpSink"]

HEALTH_COUNTERS = {  # health counter -> unit
    "points_exported": "{point}",
    "requests_exported": "{request}",
    "points_failed": "{point}",
    "retries": "{request}",
    "points_spooled": "{point}",
    "points_dropped": "{point}",
    "nonfinite_values": "1",
}
HEALTH_POINTS = len(HEALTH_COUNTERS) + 3
"""Health points in every request: the counters, two depth gauges, the latency histogram."""

Item = Snapshot | SignalRequest
"""What the OTLP sink's queue holds: a snapshot (metrics and samples) or a trace request."""


class OtlpSink(Sink):
    """Sends snapshots to an OTLP/gRPC endpoint; run it behind a QueuedSink.

    Args:
        endpoint: ``host:port`` or ``http(s)://host:port`` of the OTLP/gRPC receiver.
        insecure: plaintext gRPC (ignored when ``tls`` is given).
        tls: ``otlp.tls``: the CA and client cert/key files of a TLS channel.
        headers: gRPC metadata sent with every request (never logged).
        timeout_s: deadline of one request.
        queue_size: snapshots waiting in memory at most (the queue's bound).
        max_points_per_request: data points per request, step gauges included.
        spool: the queue's overflow on disk; None keeps data in memory only.
        cumulative: send scalar streams as running totals (rollout and eval workers).
        start_unix_nano: the sender's start: health counters and running totals start here.
        backoff_s: first retry delay; doubles per failure up to ``max_backoff_s``, jittered.
        max_backoff_s: the longest delay between two attempts.

    ``queue_size``, ``timeout_s`` and ``max_points_per_request`` are ``otlp``'s, validated
    by its schema (:class:`~telemetry.config.OtlpConfig`).

    Raises:
        ConfigError: a backoff delay is out of range.
    """

    name = "otlp"

    def __init__(
        self,
        endpoint: str,
        *,
        insecure: bool = True,
        tls: OtlpTlsConfig | None = None,
        headers: dict | None = None,
        timeout_s: float = 10.0,
        queue_size: int = 1024,
        max_points_per_request: int = 5000,
        spool: Spool | None = None,
        cumulative: bool = False,
        start_unix_nano: int | None = None,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
    ) -> None:
        if backoff_s <= 0 or max_backoff_s < backoff_s:
            raise ConfigError("otlp: need 0 < backoff_s <= max_backoff_s")
        # One call sends every request of a snapshot; a request starts only while a whole
        # request deadline still fits in the call's (see export).
        self.delivery = Delivery(
            queue_size,
            2 * timeout_s + 1.0,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            jitter=True,
            spill_after_s=0.0,  # the spool takes over from the first failed request
        )
        self.timeout_s = timeout_s
        self.max_points = max_points_per_request
        self.spool = spool
        self.overflow = None if spool is None else SpoolOverflow(self, spool)
        self.cumulative = cumulative
        self.start_unix_nano = time.time_ns() if start_unix_nano is None else start_unix_nano
        self.sender = OtlpSender(
            endpoint,
            insecure=insecure,
            tls=tls,
            headers=headers,
            timeout_s=timeout_s,
            down_hint=down_hint(endpoint, spool),
        )
        self._lock = threading.Lock()
        self._pending: tuple[Item, list[Part]] | None = None  # requests not yet sent
        self._window_start = self.start_unix_nano
        self._totals: dict[tuple, tuple[float, int]] = {}  # cumulative scalar (sum, count)
        self._nonfinite = self._dropped = 0
        self._dropped_items = dict.fromkeys(ITEM_NAMES, 0)  # spans, log records
        self._depth: Callable[[], int] = lambda: 0
        self._queue: Any = None  # the queue in front (its submit and force_flush)
        self._closed = False

    # -- the sink contract -------------------------------------------------------------

    def export(self, snapshot: Item, timeout_s: float = 10.0) -> ExportResult:
        """Send ``snapshot``'s requests in order; FAILURE keeps the rest for the retry."""
        if self._closed:
            self.discard(snapshot)  # nobody else counts a snapshot offered after shutdown
            return ExportResult.PERMANENT_FAILURE
        start = time.monotonic()
        parts = self.requests_left(snapshot)
        rejected = False
        first = True
        while parts:
            if not first and time.monotonic() - start + self.timeout_s > timeout_s:
                return ExportResult.FAILURE  # no room for another request: the retry goes on
            first = False
            result = self.sender.send(parts[0])
            if result is ExportResult.FAILURE:
                return result
            rejected = rejected or result is ExportResult.PERMANENT_FAILURE
            parts.pop(0)
        with self._lock:
            self._pending = None
        return ExportResult.PERMANENT_FAILURE if rejected else ExportResult.SUCCESS

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Close the channel (a request in flight is cancelled); safe to call twice."""
        del timeout_s
        if not self._closed:
            self._closed = True
            self.sender.close()

    def attach(self, depth: Callable[[], int]) -> None:
        """Keep the queue's depth reader, and the queue itself (the object ``depth`` is
        bound to): the span exporter submits to it."""
        self._depth = depth
        self._queue = getattr(depth, "__self__", None)

    def span_exporter(self) -> SpanExporter:
        """An OpenTelemetry ``SpanExporter`` that queues span batches for this sink.

        Put it behind a ``BatchSpanProcessor``: its ``export`` encodes a batch (the SDK's
        ``encode_spans``) and queues it without blocking; the queue sends it with
        ``TraceService/Export``, with the retries, backoff, pushback and spool of metrics.
        A batch the queue refuses (full, closed) is counted in ``spans_dropped``.
        """
        return QueueSpanExporter(self._submit, self._flush)

    def _submit(self, request: SignalRequest) -> bool:
        queue = self._queue
        if queue is None or self._closed:  # not behind a queue, or shut down
            self.discard(request)
            return False
        return bool(queue.submit(request))

    def _flush(self, timeout_s: float) -> bool:
        queue = self._queue
        return queue is not None and bool(queue.force_flush(timeout_s))

    def retry_after(self) -> float | None:
        """The collector's retry pushback after the last failed request, if it sent one."""
        return self.sender.retry_after_s

    def discard(self, snapshot: Item) -> None:
        """Count the points of a snapshot the queue gave up as dropped (with the health
        points it would have carried, as every request counts them), and its samples; or
        the spans of a trace request."""
        with self._lock:
            if self._pending is not None and self._pending[0] is snapshot:
                parts = self._pending[1]
                self._pending = None
            elif isinstance(snapshot, SignalRequest):
                parts = [snapshot]
            else:
                parts = []
                self._dropped += len(snapshot.points) + HEALTH_POINTS
                self._dropped_items["logs"] += len(snapshot.samples)
            for part in parts:
                self._dropped += part.num_points
                if isinstance(part, SignalRequest):
                    self._dropped_items[part.signal] += part.items

    # -- health ------------------------------------------------------------------------

    def health(self) -> dict[str, float]:
        """The sender's counters, the queue's depth and the spool's size."""
        out: dict[str, float] = dict(self.sender.counts())
        spool = self.spool
        with self._lock:
            out["points_dropped"] = self._dropped + (0 if spool is None else spool.dropped_points)
            out["nonfinite_values"] = self._nonfinite
            for signal, name in ITEM_NAMES.items():
                spooled = 0 if spool is None else spool.dropped_items[signal]
                out[f"{name}_dropped"] = self._dropped_items[signal] + spooled
        out["points_spooled"] = 0 if spool is None else spool.spooled_points
        out["queue_depth"] = self._depth()
        latency = self.sender.last_latency_s
        out["last_export_latency_s"] = math.nan if latency is None else latency
        out["spool_points"] = 0 if spool is None else spool.points
        out["spool_bytes"] = 0 if spool is None else spool.bytes
        return out

    def health_points(self) -> list[Point]:
        """Health as points: counters since start, depth gauges, the latency window."""
        health = self.health()
        start = self.start_unix_nano
        points: list[Point] = [
            Counter(f"rltel/otlp/{name}", float(health[name]), unit, start_time_unix_nano=start)
            for name, unit in HEALTH_COUNTERS.items()
        ]
        points.append(
            Gauge("rltel/otlp/queue_depth", float(health["queue_depth"]), unit="{snapshot}")
        )
        points.append(Gauge("rltel/otlp/spool_bytes", float(health["spool_bytes"]), unit="By"))
        points.append(self.sender.take_latency().point("rltel/otlp/export_latency"))
        return points

    # -- the wire form -----------------------------------------------------------------

    def requests_left(self, snapshot: Item) -> list[Part]:
        """The requests of ``snapshot`` not sent yet (its metric requests, then its samples'
        logs request; or the trace request itself); its wire form is built once."""
        with self._lock:
            if self._pending is not None and self._pending[0] is snapshot:
                return self._pending[1]
        parts: list[Part]
        if isinstance(snapshot, SignalRequest):
            parts = [snapshot]
        else:
            parts = list(split(self._wire(snapshot), self.max_points))
            logs = logs_request(snapshot)
            if logs is not None:
                parts.append(logs)
        with self._lock:
            self._pending = (snapshot, parts)
        return parts

    def forget(self, snapshot: Item) -> None:
        """Drop the requests kept for ``snapshot`` (they went to the spool)."""
        with self._lock:
            if self._pending is not None and self._pending[0] is snapshot:
                self._pending = None

    def _wire(self, snapshot: Snapshot) -> Batch:
        skipped = 0
        if self.cumulative:
            snapshot, skipped = self._running_totals(snapshot)
        bad = skipped + count_nonfinite(snapshot.points)
        if bad:
            with self._lock:
                self._nonfinite += bad
        wire = replace(snapshot, points=snapshot.points + tuple(self.health_points()))
        batch = Batch(wire, self._window_start, self.start_unix_nano, self.cumulative)
        self._window_start = snapshot.time_unix_nano
        return batch

    def _running_totals(self, snapshot: Snapshot) -> tuple[Snapshot, int]:
        """Scalar streams as running totals since the start.

        A non-finite window would poison the running total for good: it is skipped and
        counted (the second value returned) in ``nonfinite_values``.
        """
        points, skipped = [], 0
        for point in snapshot.points:
            if isinstance(point, ScalarMean):
                total, count = self._totals.get(point.key, (0.0, 0))
                if not math.isfinite(point.value):
                    skipped += point.count > 0
                elif point.count > 0:
                    total, count = total + point.value * point.count, count + int(point.count)
                    self._totals[point.key] = (total, count)
                point = replace(point, value=total / count if count else 0.0, count=count)
            points.append(point)
        return replace(snapshot, points=tuple(points)), skipped
