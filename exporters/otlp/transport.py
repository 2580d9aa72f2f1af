"""One OTLP request at a time: encode a batch, export it over gRPC, classify the answer.

:class:`OtlpSender` sends metric batches with ``OTLPMetricExporter`` and encoded trace and
logs requests (:class:`~exporters.otlp.signal_requests.SignalRequest`) with
``OTLPSpanExporter`` and ``OTLPLogExporter`` (``TraceService/Export``, ``LogsService/Export``;
made on first use), all with their own retry disabled: the
queue in front of the OTLP sink retries (:mod:`exporters.queued`). An answer is an
:class:`~exporters.base.ExportResult`: SUCCESS, FAILURE (a retryable status, or an
authentication failure: the data is kept, in the queue and then the spool, until the token
is right; one error logged per minute) or PERMANENT_FAILURE (dropped and counted). Once
:meth:`OtlpSender.close` ran, no answer is PERMANENT_FAILURE: a request the closed channel
did not send, or cancelled in flight, is a FAILURE and stays queued or spooled. After a
FAILURE, :attr:`OtlpSender.retry_after_s` holds the delay the server
asked for (gRPC retry pushback, e.g. the collector's RESOURCE_EXHAUSTED), which the queue
honours. The sender counts what it delivered, what was refused, its retries and its
latencies.
"""

from __future__ import annotations

import logging
import threading
import time

import grpc
from opentelemetry.sdk.metrics.export import MetricExportResult

from exporters.base import ExportResult
from exporters.otlp.failure_run import FailureRun
from exporters.otlp.grpc_exporter import (
    RecordingExporter,
    RecordingLogExporter,
    RecordingSpanExporter,
    StatusRecorder,
    channel_credentials,
    silence_exporter_log_on,
)
from exporters.otlp.signal_requests import ITEM_NAMES, SignalRequest
from telemetry.config import OtlpTlsConfig
from telemetry.model.snapshot import Histogram
from telemetry.otlp.encode import Batch, encode_batch

__all__ = ["AUTH_CODES", "RETRYABLE_CODES", "LatencyWindow", "OtlpSender"]

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
THREAD_PREFIX = "rltel-sink-otlp"
"""The OTLP sink's queue threads: the exporter's own per-attempt log is silenced there."""
silence_exporter_log_on(THREAD_PREFIX)


class LatencyWindow:
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


class OtlpSender:
    """Sends batches to an OTLP/gRPC endpoint, one call at a time.

    Args:
        endpoint: ``host:port`` or ``http(s)://host:port`` of the OTLP/gRPC receiver.
        insecure: plaintext gRPC (ignored when ``tls`` is given).
        tls: ``otlp.tls``: the CA and client cert/key files of a TLS channel.
        headers: gRPC metadata sent with every request (never logged).
        timeout_s: deadline of one request.
        down_hint: what the warning at the first failed request of an outage adds (what
            happens to the data meanwhile); the outage's end is logged with its count.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        insecure: bool = True,
        tls: OtlpTlsConfig | None = None,
        headers: dict | None = None,
        timeout_s: float = 10.0,
        down_hint: str = "retrying",
    ) -> None:
        self.endpoint = endpoint
        self.down_hint = down_hint
        self._recorder = StatusRecorder()
        self._channel = dict(
            endpoint=endpoint,
            insecure=insecure and not tls,
            credentials=channel_credentials(tls) if tls else None,
            headers={str(k).lower(): str(v) for k, v in (headers or {}).items()},
            timeout=timeout_s,
        )
        self._exporter = RecordingExporter(self._recorder, **self._channel)
        self._signals: dict[str, RecordingSpanExporter | RecordingLogExporter] = {}
        self._lock = threading.Lock()
        items = [f"{name}_{end}" for name in ITEM_NAMES.values() for end in ("exported", "failed")]
        self._counts = dict.fromkeys(
            ("points_exported", "requests_exported", "points_failed", "retries", *items), 0
        )
        self._latency = LatencyWindow()  # latencies since the last take_latency()
        self.last_latency_s: float | None = None
        self.retry_after_s: float | None = None  # the server's pushback after a FAILURE
        self.last_failure: str | None = None  # the status name of the last FAILURE
        self._outage = FailureRun()  # failed requests since the last delivered one
        # requests dropped for good since the last delivered one, per signal: an endpoint
        # that refuses one signal (a collector without a logs service) is logged once
        self._refusals = {signal: FailureRun() for signal in ("metrics", *ITEM_NAMES)}
        self._auth_logged_at: float | None = None
        self._closed = False

    def counts(self) -> dict[str, int]:
        """``points_exported``, ``requests_exported``, ``points_failed``, ``retries``, and
        ``spans_exported``/``_failed`` and ``log_records_exported``/``_failed``."""
        with self._lock:
            return dict(self._counts)

    def take_latency(self) -> LatencyWindow:
        """The latencies since the previous call; starts a new window."""
        with self._lock:
            window, self._latency = self._latency, LatencyWindow()
        return window

    def close(self) -> None:
        """Close the channel; a request in flight is cancelled (it answers FAILURE)."""
        with self._lock:
            self._closed = True
            exporters = [self._exporter, *self._signals.values()]
        for exporter in exporters:
            exporter.shutdown()

    def _signal_exporter(self, signal: str) -> RecordingSpanExporter | RecordingLogExporter:
        """The exporter of ``signal``'s service, made on first use (a closed sender's is
        made shut down: its export answers FAILURE)."""
        with self._lock:
            exporter = self._signals.get(signal)
            if exporter is None:
                kind = RecordingSpanExporter if signal == "traces" else RecordingLogExporter
                exporter = self._signals[signal] = kind(self._recorder, **self._channel)
                if self._closed:
                    exporter.shutdown()
        return exporter

    def send(self, batch: Batch | SignalRequest) -> ExportResult:
        """Encode (a metric batch) and send ``batch``; never raises."""
        start = time.monotonic()
        self._recorder.code = self._recorder.retry_after_s = None
        self.retry_after_s = None
        try:
            if isinstance(batch, SignalRequest):
                answer = self._signal_exporter(batch.signal).export(batch.request)
                ok = answer.name == "SUCCESS"  # SpanExportResult or LogRecordExportResult
            else:
                ok = self._exporter.export(encode_batch(batch)) is MetricExportResult.SUCCESS
        except Exception as exc:  # encoding or exporter bug: retrying cannot help
            if self._closed:  # the channel closed under the call: nothing was refused
                return self._unsent()
            return self._refused(batch, f"cannot send: {exc}")
        if ok:
            latency = time.monotonic() - start
            with self._lock:
                self._counts["points_exported"] += batch.num_points
                self._counts["requests_exported"] += 1
                if isinstance(batch, SignalRequest):
                    self._counts[f"{ITEM_NAMES[batch.signal]}_exported"] += batch.items
                self._latency.add(latency)
                self.last_latency_s = latency
            ended = self._outage.succeeded()
            if ended is not None:
                logger.warning(
                    "otlp: %s takes requests again after %d failed attempts%s",
                    self.endpoint,
                    ended.failures,
                    ended.over(),
                )
            signal = _signal(batch)
            ended = self._refusals[signal].succeeded()
            if ended is not None:
                logger.warning(
                    "otlp: %s takes %srequests again; %d requests (%d points) were dropped "
                    "before%s",
                    self.endpoint,
                    "" if signal == "metrics" else f"{signal} ",
                    ended.failures,
                    ended.points,
                    ended.over(),
                )
            self._auth_logged_at = None
            return ExportResult.SUCCESS
        code = self._recorder.code
        if self._closed or code in AUTH_CODES or code in RETRYABLE_CODES:
            self.retry_after_s = self._recorder.retry_after_s
            self._bump("retries", 1)
            first = self._outage.failed(batch.num_points)
            name = code.name if code is not None else "closed"
            self.last_failure = name
            if code in AUTH_CODES:
                self._log_auth(code)
            elif first and not self._closed:
                logger.warning(
                    "otlp: export to %s failed (%s); %s", self.endpoint, name, self.down_hint
                )
            return ExportResult.FAILURE
        return self._refused(batch, f"export rejected ({code.name if code else 'no status'})")

    def _unsent(self) -> ExportResult:
        """A request that met the closed channel (``close`` ran between the exporter's own
        check and its call: gRPC raises ``Cannot invoke RPC on closed channel!``): it was
        not sent, so it stays where it is (queue, spool) and counts as a retry."""
        self._bump("retries", 1)
        self.retry_after_s = None
        self.last_failure = "closed"
        return ExportResult.FAILURE

    def _refused(self, batch: Batch | SignalRequest, why: str) -> ExportResult:
        """Count a request dropped for good; log the first of a run of them."""
        self._bump("points_failed", batch.num_points)
        if isinstance(batch, SignalRequest):
            self._bump(f"{ITEM_NAMES[batch.signal]}_failed", batch.items)
        if self._refusals[_signal(batch)].failed(batch.num_points):
            if isinstance(batch, SignalRequest):
                name = ITEM_NAMES[batch.signal]
                what, counter = f"{batch.items} {name.replace('_', ' ')}", f"{name}_failed"
            else:
                what, counter = f"{batch.num_points} points", "points_failed"
            logger.warning(
                "otlp: %s; dropping %s (further drops counted in %s)", why, what, counter
            )
        return ExportResult.PERMANENT_FAILURE

    def _log_auth(self, code: grpc.StatusCode) -> None:
        now = time.monotonic()
        if self._auth_logged_at is None or now - self._auth_logged_at >= AUTH_LOG_INTERVAL_S:
            self._auth_logged_at = now
            logger.error(
                "otlp: the collector refused our credentials (%s); keeping the data "
                "(queue, then spool) until the token is right",
                code.name,
            )

    def _bump(self, name: str, value: int) -> None:
        with self._lock:
            self._counts[name] += value


def _signal(batch: Batch | SignalRequest) -> str:
    return batch.signal if isinstance(batch, SignalRequest) else "metrics"
