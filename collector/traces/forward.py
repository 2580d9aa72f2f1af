"""Forwarding accepted trace requests to an OTLP/gRPC trace endpoint (Jaeger, Tempo, an
OpenTelemetry Collector), behind the queue every sink has.

The request is forwarded as it arrived (its serialized bytes, every resource and span as
the sender wrote them), so nothing is decoded and encoded again. :class:`TraceForwarder`
puts :class:`TraceEndpoint` (a sink whose items are those bytes) behind
:class:`exporters.queued.QueuedSink`, the queue, retry and timeout of every sink:
:meth:`TraceForwarder.submit` never blocks (a full queue drops the request and counts it),
one named daemon thread sends one request at a time, retryable statuses
(``exporters.otlp.transport.RETRYABLE_CODES``) are retried with a doubling backoff, at
least the delay the receiver asked for (gRPC retry pushback, read as the OTLP sink reads it:
``exporters.otlp.grpc_exporter.retry_pushback``), others are dropped and counted; a failing
endpoint is logged when the failures start and when they end, with a count.
:meth:`TraceForwarder.close` drains with a deadline.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collector.traces.config import TraceForwardConfig
from exporters.base import Delivery, ExportResult, Sink
from exporters.otlp.failure_run import FailureRun
from exporters.otlp.grpc_exporter import grpc_channel, retry_pushback
from exporters.otlp.transport import RETRYABLE_CODES
from exporters.queued import QueuedSink

__all__ = ["EXPORT_METHOD", "ForwardStats", "TraceEndpoint", "TraceForwarder"]

logger = logging.getLogger(__name__)

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MAX_BACKOFF_S = 5.0
CALL_MARGIN_S = 1.0
"""How much longer than its gRPC deadline the queue lets one call run before abandoning it."""


@dataclass(frozen=True, slots=True)
class ForwardStats:
    """Requests forwarded, dropped (queue full, or left at close), failed (given up),
    retried; queued now (the one in flight included)."""

    sent: int
    dropped: int
    failed: int
    retried: int
    queued: int


class TraceEndpoint(Sink[bytes]):
    """An OTLP/gRPC ``TraceService``: a sink of serialized ``ExportTraceServiceRequest``s.

    Answers FAILURE (retried by the queue) for a retryable status, with the receiver's
    retry pushback as :meth:`retry_after`, and PERMANENT_FAILURE for any other.

    Args:
        config: the ``traces.forward`` section (an endpoint set).
    """

    name = "trace-forward"

    def __init__(self, config: TraceForwardConfig) -> None:
        self.config = config
        tls = config.tls if config.tls.enabled else None
        self._channel = grpc_channel(config.endpoint, insecure=config.insecure, tls=tls)
        self._export = self._channel.unary_unary(
            EXPORT_METHOD,
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        self._metadata = tuple(config.headers.items())
        self._pushback: float | None = None
        self._failures = FailureRun()
        self._closed = False
        self.delivery = Delivery(
            queue_size=config.queue_size,
            timeout_s=config.timeout_s + CALL_MARGIN_S,
            max_retries=config.max_retries,
            backoff_s=config.backoff_s,
            max_backoff_s=MAX_BACKOFF_S,
        )

    def export(self, snapshot: bytes, timeout_s: float = 10.0) -> ExportResult:
        """Send one serialized request."""
        del timeout_s  # the call's own deadline is ``timeout_s`` of the config
        if self._closed:
            return ExportResult.PERMANENT_FAILURE  # given up at close, counted failed
        config = self.config
        try:
            self._export(snapshot, timeout=config.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            code = exc.code()
            self._pushback = retry_pushback(exc.trailing_metadata())
            if self._failures.failed():
                logger.error(
                    "traces: forwarding to %s failed: %s %s", config.endpoint, code.name,
                    exc.details(),
                )  # fmt: skip
            return (
                ExportResult.FAILURE if code in RETRYABLE_CODES else ExportResult.PERMANENT_FAILURE
            )
        self._pushback = None
        end = self._failures.succeeded()
        if end is not None:
            logger.warning(
                "traces: forwarding to %s again after %d failures", config.endpoint, end.failures
            )
        return ExportResult.SUCCESS

    def retry_after(self) -> float | None:
        """The delay the receiver asked for with its last refusal."""
        return self._pushback

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Close the channel (a call in flight ends with CANCELLED); send nothing more."""
        del timeout_s
        self._closed = True
        self._channel.close()


class TraceForwarder:
    """Sends trace requests to ``config.endpoint`` through a :class:`QueuedSink`.

    Args:
        config: the ``traces.forward`` section (an endpoint set).
    """

    def __init__(self, config: TraceForwardConfig) -> None:
        self.config = config
        self._queue = QueuedSink.of(TraceEndpoint(config), name="trace-forward")
        self._lock = threading.Lock()
        self._submitted = 0  # accepted or not: each ends sent, failed or dropped
        self._full = FailureRun()

    def submit(self, request: bytes) -> bool:
        """Queue one serialized ``ExportTraceServiceRequest``; False (counted) when full."""
        with self._lock:
            self._submitted += 1
        if not self._queue.submit(request):
            if self._full.failed():
                logger.error(
                    "traces: forward queue full (%d requests): dropping", self.config.queue_size
                )
            return False
        end = self._full.succeeded()
        if end is not None:
            logger.warning("traces: forward queue took requests again; %d dropped", end.failures)
        return True

    def stats(self) -> ForwardStats:
        """A copy of the counters."""
        counts = self._queue.stats()
        with self._lock:
            submitted = self._submitted
        done = counts.exported + counts.failed + counts.dropped
        return ForwardStats(
            counts.exported, counts.dropped, counts.failed, counts.retried, submitted - done
        )

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued request was sent or given up; True if in time."""
        return self._queue.force_flush(timeout_s)

    def close(self, timeout_s: float) -> None:
        """Send what is queued within ``timeout_s``, then stop; what is left is counted
        dropped. Safe twice."""
        self._queue.shutdown(timeout_s)
