"""The OTLP/gRPC transport: a bounded queue, one named daemon worker, retry, spool.

``submit`` never blocks: it splits a batch into requests and appends them to a bounded
queue (a full queue drops the whole batch and counts its points). The worker encodes each
request and sends it with ``OTLPMetricExporter``; retryable gRPC failures are retried with
jittered exponential backoff, permanent ones are dropped and counted. When failures last
``spool_after_s`` or the queue fills past half, the held request and everything queued
go to the on-disk :class:`~exporters.otlp.spool.Spool` and are replayed from there, in order,
when the collector is back. ``close`` drains with a deadline and spools what is left.
An authentication failure (UNAUTHENTICATED, PERMISSION_DENIED) keeps the data the same
way, with one error logged per minute: once the token is right, the spool replays.
A process forked from one with a running transport (data-loader workers) gets a disabled
copy: it neither sends the parent's queue again nor blocks on the parent's locks.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
import weakref
from collections import deque

import grpc
from opentelemetry.sdk.metrics.export import MetricExportResult

from exporters.otlp.grpc_exporter import (
    RecordingExporter,
    StatusRecorder,
    channel_credentials,
    silence_exporter_log_on,
)
from exporters.otlp.spool import Spool
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Counter, Gauge, Histogram, Point
from telemetry.otlp.encode import Batch, count_nonfinite, encode_batch, split

__all__ = ["RETRYABLE_CODES", "OtlpTransport"]

logger = logging.getLogger(__name__)

RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
AUTH_CODES = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
AUTH_LOG_INTERVAL_S = 60.0
_THREAD_NAME = "rltel-otlp-transport"
silence_exporter_log_on(_THREAD_NAME)
_OK, _RETRY, _PERMANENT = "ok", "retry", "permanent"
_COUNTERS = {  # health counter -> unit
    "points_exported": "{point}",
    "requests_exported": "{request}",
    "points_failed": "{point}",
    "retries": "{request}",
    "points_spooled": "{point}",
    "points_dropped": "{point}",
    "nonfinite_values": "1",
}
_TRANSPORTS: weakref.WeakSet[OtlpTransport] = weakref.WeakSet()


class _LatencyWindow:
    """Count, sum, min and max of export latencies in one window."""

    def __init__(self) -> None:
        self.count, self.sum = 0, 0.0
        self.min: float | None = None
        self.max: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.sum += value
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)

    def point(self, metric: str) -> Histogram:
        return Histogram(metric, self.count, self.sum, self.min, self.max, unit="s")


class OtlpTransport:
    """Sends batches to an OTLP/gRPC endpoint from a background thread.

    Args:
        endpoint: ``host:port`` or ``http(s)://host:port`` of the OTLP/gRPC receiver.
        insecure: plaintext gRPC (ignored when ``tls`` is given).
        tls: ``{"ca_file", "cert_file", "key_file"}`` paths for a TLS channel.
        headers: gRPC metadata sent with every request (never logged).
        timeout_s: deadline of one export request.
        queue_size: requests waiting in memory at most.
        max_points_per_request: data points per request, step gauges included.
        spool: where requests go during a prolonged outage; None keeps them in memory only.
        backoff_s: first retry delay; doubles per failure up to ``max_backoff_s``, jittered.
        max_backoff_s: the longest delay between two attempts.
        spool_after_s: how long failures last before requests move to the spool.
        start_unix_nano: start time of the health counters.

    Raises:
        ConfigError: a limit is out of range or ``tls`` has an unknown key.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        insecure: bool = True,
        tls: dict | None = None,
        headers: dict | None = None,
        timeout_s: float = 10.0,
        queue_size: int = 1024,
        max_points_per_request: int = 5000,
        spool: Spool | None = None,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
        spool_after_s: float = 2.0,
        start_unix_nano: int | None = None,
    ) -> None:
        if queue_size < 1 or max_points_per_request < 4 or timeout_s <= 0:
            raise ConfigError(
                "otlp: queue_size must be >= 1, max_points_per_request >= 4, timeout > 0; "
                f"got {queue_size}, {max_points_per_request}, {timeout_s}"
            )
        if backoff_s <= 0 or max_backoff_s < backoff_s or spool_after_s < 0:
            raise ConfigError("otlp: need 0 < backoff_s <= max_backoff_s and spool_after_s >= 0")
        self.queue_size = queue_size
        self.max_points = max_points_per_request
        self.spool = spool
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.spool_after_s = spool_after_s
        self.start_unix_nano = time.time_ns() if start_unix_nano is None else start_unix_nano
        self._recorder = StatusRecorder()
        self._exporter = RecordingExporter(
            self._recorder,
            endpoint=endpoint,
            insecure=insecure and not tls,
            credentials=channel_credentials(tls) if tls else None,
            headers={str(k).lower(): str(v) for k, v in (headers or {}).items()},
            timeout=timeout_s,
        )
        self._lock = threading.Condition()
        self._queue: deque[Batch] = deque()
        self._closing = False
        self._deadline = math.inf
        self._forked = False
        self._result: bool | None = None
        self._failing_since: float | None = None
        self._auth_logged_at: float | None = None
        self._counts = {name: 0 for name in _COUNTERS if name != "points_spooled"}
        self._latency = _LatencyWindow()  # export latencies since the last health_points()
        self._last_latency: float | None = None
        self._worker = threading.Thread(target=self._run, name=_THREAD_NAME, daemon=True)
        self._worker.start()
        _TRANSPORTS.add(self)

    # -- caller side -----------------------------------------------------------------

    def submit(self, batch: Batch) -> bool:
        """Queue ``batch`` for export without blocking.

        Returns:
            False when the batch was dropped (queue full, closed, or a forked child);
            its points are counted in ``points_dropped``.
        """
        parts = split(batch, self.max_points)
        with self._lock:
            full = self._queue and len(self._queue) + len(parts) > self.queue_size
            if self._forked or self._closing or full:
                self._counts["points_dropped"] += batch.num_points
                return False
            self._queue.extend(parts)
            self._lock.notify()
        return True

    def count_nonfinite(self, count: int) -> None:
        """Add ``count`` non-finite values the caller found and did not submit as they are."""
        if count:
            self._bump("nonfinite_values", count)

    def health(self) -> dict[str, float]:
        """The transport's counters and current depths."""
        spool = self.spool
        with self._lock:
            out: dict[str, float] = dict(self._counts)
            out["queue_depth"] = len(self._queue)
            out["last_export_latency_s"] = (
                math.nan if self._last_latency is None else self._last_latency
            )
        out["points_spooled"] = 0 if spool is None else spool.spooled_points
        out["points_dropped"] += 0 if spool is None else spool.dropped_points
        out["spool_points"] = 0 if spool is None else spool.points
        out["spool_bytes"] = 0 if spool is None else spool.bytes
        return out

    def health_points(self) -> list[Point]:
        """Health as points: counters since start, depth gauges, the latency window."""
        health = self.health()
        with self._lock:
            window, self._latency = self._latency, _LatencyWindow()
        start = self.start_unix_nano
        points: list[Point] = [
            Counter(f"rltel/otlp/{name}", float(health[name]), unit, start_time_unix_nano=start)
            for name, unit in _COUNTERS.items()
        ]
        points.append(
            Gauge("rltel/otlp/queue_depth", float(health["queue_depth"]), unit="{request}")
        )
        points.append(Gauge("rltel/otlp/spool_bytes", float(health["spool_bytes"]), unit="By"))
        points.append(window.point("rltel/otlp/export_latency"))
        return points

    def close(self, timeout_s: float = 10.0) -> bool:
        """Drain the queue and the spool until ``timeout_s``; spool what is left; safe twice.

        Returns:
            True when everything submitted was delivered (nothing left queued or spooled).
        """
        with self._lock:
            if self._forked:
                return False
            first = not self._closing
            if first:
                self._deadline = time.monotonic() + max(0.0, timeout_s)
                self._closing = True
                self._lock.notify_all()
        self._worker.join(max(0.0, timeout_s))
        if not first:
            return bool(self._result)
        self._exporter.shutdown()  # closes the channel: cancels a request still in flight
        self._worker.join(1.0)
        with self._lock:
            left = sum(batch.num_points for batch in self._queue)
            self._queue.clear()
            self._counts["points_dropped"] += left
            spooled = 0 if self.spool is None else len(self.spool)
            self._result = left == 0 and spooled == 0 and not self._worker.is_alive()
        return self._result

    # -- worker side -----------------------------------------------------------------

    def _run(self) -> None:
        held: Batch | None = None  # taken from the queue, not delivered, not in the spool
        attempt = 0
        while True:
            if self._closing and time.monotonic() >= self._deadline:
                return self._finish(held)
            if self._should_spill(held):
                held = self._spill(held)
            if held is None and not self._spool_len():
                held = self._take()
                if held is None:
                    return self._finish(None)
            batch = held if held is not None else self.spool.peek()
            if batch is None:
                continue
            outcome = self._send(batch)
            if outcome != _RETRY:
                if held is None:
                    self.spool.pop()
                held, attempt, self._failing_since = None, 0, None
                continue
            if self._failing_since is None:
                self._failing_since = time.monotonic()
            if self._closing and self.spool is not None:
                return self._finish(held)  # collector down at close: the spool keeps it all
            held = self._wait_backoff(attempt, held)
            attempt += 1
            self._bump("retries", 1)

    def _finish(self, held: Batch | None) -> None:
        """Worker exit: spool what is still held or queued; count what cannot be kept."""
        held = self._spill(held)
        if held is not None:
            self._bump("points_dropped", held.num_points)

    def _take(self) -> Batch | None:
        with self._lock:
            while not self._queue and not self._closing:
                self._lock.wait()
            if not self._queue or time.monotonic() >= self._deadline:
                return None
            batch = self._queue.popleft()
        self._count_nonfinite(batch)
        return batch

    def _spool_len(self) -> int:
        return 0 if self.spool is None else len(self.spool)

    def _should_spill(self, held: Batch | None) -> bool:
        """Spill when the queue is half full, or when failures are prolonged."""
        if self.spool is None:
            return False
        with self._lock:
            depth = len(self._queue)
        if depth >= max(1, self.queue_size // 2):
            return True
        since = self._failing_since
        prolonged = since is not None and time.monotonic() - since >= self.spool_after_s
        return prolonged and (depth > 0 or held is not None)

    def _spill(self, held: Batch | None) -> Batch | None:
        """Move ``held`` and then the queue, in order, to the spool; without one keep ``held``."""
        if self.spool is None:
            return held
        if held is not None:
            self.spool.append(held)
        while True:
            with self._lock:
                if not self._queue:
                    return None
                batch = self._queue.popleft()
            self._count_nonfinite(batch)
            self.spool.append(batch)

    def _wait_backoff(self, attempt: int, held: Batch | None) -> Batch | None:
        """Sleep a jittered backoff, spilling arriving requests once failures are prolonged."""
        delay = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        end = min(time.monotonic() + delay * random.uniform(0.5, 1.0), self._deadline)
        while True:
            if self._should_spill(held):
                held = self._spill(held)
            now = time.monotonic()
            if now >= min(end, self._deadline):
                return held
            with self._lock:
                self._lock.wait(min(end, self._deadline) - now)

    def _send(self, batch: Batch) -> str:
        start = time.monotonic()
        self._recorder.code = None
        try:
            result = self._exporter.export(encode_batch(batch))
        except Exception as exc:  # encoding or exporter bug: retrying cannot help
            logger.warning("otlp: dropping %d points: %s", batch.num_points, exc)
            self._bump("points_failed", batch.num_points)
            return _PERMANENT
        if result is MetricExportResult.SUCCESS:
            latency = time.monotonic() - start
            with self._lock:
                self._counts["points_exported"] += batch.num_points
                self._counts["requests_exported"] += 1
                self._latency.add(latency)
                self._last_latency = latency
            if self._failing_since is not None:
                logger.warning("otlp: collector reachable again, delivering backlog")
            self._auth_logged_at = None
            return _OK
        code = self._recorder.code
        if code in AUTH_CODES:
            now = time.monotonic()
            if self._auth_logged_at is None or now - self._auth_logged_at >= AUTH_LOG_INTERVAL_S:
                self._auth_logged_at = now
                logger.error(
                    "otlp: the collector refused our credentials (%s); keeping the data "
                    "(queue, then spool) until the token is right",
                    code.name,
                )
            return _RETRY
        if code in RETRYABLE_CODES:
            if self._failing_since is None:
                logger.warning("otlp: export failed (%s); retrying, then spooling", code)
            return _RETRY
        logger.warning("otlp: export rejected (%s); dropping %d points", code, batch.num_points)
        self._bump("points_failed", batch.num_points)
        return _PERMANENT

    def _bump(self, name: str, value: int) -> None:
        with self._lock:
            self._counts[name] += value

    def _count_nonfinite(self, batch: Batch) -> None:
        bad = count_nonfinite(batch.snapshot.points)
        if bad:
            self._bump("nonfinite_values", bad)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Condition()
        self._queue = deque()
        self._forked = True


def _after_fork_in_child() -> None:
    for transport in list(_TRANSPORTS):
        transport._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
