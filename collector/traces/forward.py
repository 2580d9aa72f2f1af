"""Forwarding accepted trace requests to an OTLP/gRPC trace endpoint (Jaeger, Tempo, an
OpenTelemetry Collector), behind a bounded queue with retry.

The request is forwarded as it arrived (its serialized bytes, every resource and span as
the sender wrote them), so nothing is decoded and encoded again. The queue is its own, not
:class:`exporters.queued.QueuedSink`: that queue carries Snapshots (its journal, spool and
memory charge read them), and the SDK's ``OTLPSpanExporter`` takes SDK span objects, not
the protobuf the collector holds. The policy is the same: :meth:`TraceForwarder.submit`
never blocks (a full queue drops the request and counts it), one named daemon thread sends
one request at a time, retryable statuses (``exporters.otlp.transport.RETRYABLE_CODES``)
are retried with a doubling backoff, at least the delay the receiver asked for (gRPC retry
pushback, read as the OTLP sink reads it: ``exporters.otlp.grpc_exporter.retry_pushback``;
the loop is :func:`exporters.retry.retry`, every delivery path's),
others are dropped and counted; a failing endpoint is logged when the failures start and
when they end, with a count. :meth:`TraceForwarder.close` drains with a deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collector.traces.config import TraceForwardConfig
from exporters.otlp.failure_run import FailureRun
from exporters.otlp.grpc_exporter import channel_credentials, retry_pushback
from exporters.otlp.transport import RETRYABLE_CODES
from exporters.retry import Backoff, retry

__all__ = ["EXPORT_METHOD", "ForwardStats", "TraceForwarder"]

logger = logging.getLogger(__name__)

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MAX_BACKOFF_S = 5.0


@dataclass(frozen=True, slots=True)
class ForwardStats:
    """Requests forwarded, dropped (queue full), failed (given up), retried; queued now
    (the one in flight included)."""

    sent: int
    dropped: int
    failed: int
    retried: int
    queued: int


class TraceForwarder:
    """Sends trace requests to ``config.endpoint`` from a thread of its own.

    Args:
        config: the ``traces.forward`` section (an endpoint set).
    """

    def __init__(self, config: TraceForwardConfig) -> None:
        self.config = config
        target = config.endpoint.removeprefix("http://").removeprefix("https://")
        if config.tls.enabled or config.endpoint.startswith("https://"):
            self._channel = grpc.secure_channel(target, channel_credentials(config.tls))
        elif config.insecure:
            self._channel = grpc.insecure_channel(target)
        else:
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials())
        self._export = self._channel.unary_unary(
            EXPORT_METHOD,
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        self._metadata = tuple(config.headers.items())
        self._queue: deque[bytes] = deque()
        self._cond = threading.Condition()
        self._closing = threading.Event()
        self._busy = False
        self._sent = self._dropped = self._failed = self._retried = 0
        self._failures = FailureRun()  # failed forwards, in a row
        self._full = FailureRun()  # requests refused by a full queue, in a row
        self._thread = threading.Thread(target=self._run, name="rltel-trace-forward", daemon=True)
        self._thread.start()

    def submit(self, request: bytes) -> bool:
        """Queue one serialized ``ExportTraceServiceRequest``; False (counted) when full."""
        with self._cond:
            if self._closing.is_set() or len(self._queue) >= self.config.queue_size:
                self._dropped += 1
                if self._full.failed():
                    logger.error(
                        "traces: forward queue full (%d requests): dropping",
                        self.config.queue_size,
                    )
                return False
            self._queue.append(request)
            self._cond.notify()
        end = self._full.succeeded()
        if end is not None:
            logger.warning("traces: forward queue took requests again; %d dropped", end.failures)
        return True

    def stats(self) -> ForwardStats:
        """A copy of the counters."""
        with self._cond:
            queued = len(self._queue) + self._busy
            return ForwardStats(self._sent, self._dropped, self._failed, self._retried, queued)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued request was sent or given up; True if in time."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float) -> None:
        """Send what is queued within ``timeout_s``, then stop; what is left is counted
        dropped. Safe twice."""
        self.flush(timeout_s)
        self._closing.set()
        with self._cond:
            self._dropped += len(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(1.0)
        self._channel.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing.is_set():
                    self._cond.wait()
                if not self._queue:
                    return
                request = self._queue.popleft()
                self._busy = True
            try:
                sent = self._send(request)
            except Exception:  # a bug must cost one request, never the thread
                logger.exception("traces: forwarding failed")
                sent = False
            with self._cond:
                self._busy = False
                if sent:
                    self._sent += 1
                else:
                    self._failed += 1
                self._cond.notify_all()

    def _send(self, request: bytes) -> bool:
        """One request, retried while the answer is retryable; True once it was accepted."""
        config = self.config
        error = retry(
            lambda: self._attempt(request),
            lambda error: error is not None and error.code() in RETRYABLE_CODES,
            self._pause,
            Backoff(config.backoff_s, MAX_BACKOFF_S),
            max_retries=config.max_retries,
            pushback=lambda error: retry_pushback(error.trailing_metadata()),
        )
        if error is not None:
            return False
        end = self._failures.succeeded()
        if end is not None:
            logger.warning(
                "traces: forwarding to %s again after %d failures", config.endpoint, end.failures
            )
        return True

    def _attempt(self, request: bytes) -> grpc.RpcError | None:
        """One call: None once the request was accepted, else the error (logged when the
        failures start)."""
        try:
            self._export(request, timeout=self.config.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            if self._failures.failed():
                logger.error(
                    "traces: forwarding to %s failed: %s %s",
                    self.config.endpoint, exc.code().name, exc.details(),
                )  # fmt: skip
            return exc
        return None

    def _pause(self, error: grpc.RpcError, wait_s: float) -> bool:
        """Wait before the next try; no retry once closing."""
        del error
        if self._closing.is_set():
            return False
        self._retried += 1
        self._closing.wait(wait_s)
        return True
