"""The OTLP/gRPC exporter as the OTLP sink uses it: status codes and retry pushback recorded,
TLS from files, a TLS mismatch named.

gRPC answers a plaintext channel to a TLS port, and a TLS channel to a plaintext one, with
UNAVAILABLE only; the recorder reads the call's details and logs what they point at (once
per kind, again after a call went through), beside the sender's own failure line. A plaintext
channel's ``Socket closed`` is also what a dying plaintext server gives, so it is named a TLS
port only when the endpoint answers a TLS ClientHello with TLS (:mod:`.tls_probe`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import grpc
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

from exporters.otlp.tls_probe import speaks_tls
from telemetry.config import OtlpTlsConfig
from telemetry.otlp.wire import PUSHBACK_KEY, RETRY_INFO_KEY

logger = logging.getLogger(__name__)


def tls_mismatch(details: str, tls: bool, ask_endpoint: Callable[[], bool]) -> str | None:
    """What an UNAVAILABLE call's ``details`` say about the channel's TLS, or None.

    ``ask_endpoint`` says whether the endpoint speaks TLS (:func:`speaks_tls`); it is called
    only for a plaintext channel whose connection was closed, the one failure a TLS port and
    a dying plaintext server share.
    """
    text = details.lower()
    if tls and "handshake failed" in text:
        if "wrong_version_number" in text:
            return (
                "the TLS handshake failed: the endpoint speaks plaintext (a TLS channel to a "
                "plaintext port: set otlp.insecure: true without otlp.tls, or give the "
                "collector receiver.tls)"
            )
        failure = details[text.index("handshake failed") :]
        return f"the TLS {failure} (check otlp.tls.ca_file against the endpoint's certificate)"
    if not tls and "socket closed" in text and ask_endpoint():
        return (
            "the endpoint closed the connection at once: a plaintext channel to a TLS port? "
            "(set otlp.insecure: false and otlp.tls.ca_file)"
        )
    return None


class StatusRecorder(grpc.UnaryUnaryClientInterceptor):
    """Remembers the status code of the latest call made through its channel, and the
    delay its server asked for before a retry (``retry_after_s``, None when it named none).
    """

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.retry_after_s: float | None = None
        self.tls = False  # the channel's, set by RecordingExporter
        self.target = ""
        self.mismatch: str | None = None  # the TLS mismatch the last failure pointed at

    def intercept_unary_unary(self, continuation, client_call_details, request):
        outcome = continuation(client_call_details, request)
        self.code = outcome.code()
        ok = self.code is grpc.StatusCode.OK
        self.retry_after_s = None if ok else retry_pushback(outcome.trailing_metadata())
        if ok:
            self.mismatch = None
        elif self.code is grpc.StatusCode.UNAVAILABLE:
            details = outcome.details() or ""
            mismatch = tls_mismatch(details, self.tls, lambda: speaks_tls(self.target))
            if mismatch is not None and mismatch != self.mismatch:
                logger.warning("otlp: %s: %s", self.target, mismatch)
            self.mismatch = mismatch or self.mismatch
        return outcome


def retry_pushback(trailers) -> float | None:
    """Seconds the server asked to wait: ``grpc-retry-pushback-ms``, else ``RetryInfo``.

    The one reader of a gRPC retry pushback: the OTLP sink's exporter and the collector's
    trace forwarder (:mod:`collector.traces.forward`) both ask it. A malformed, negative or
    out-of-range value (past a float) names no delay (None).
    """
    found = dict(trailers or ())
    pushback = found.get(PUSHBACK_KEY)
    if pushback is not None:
        try:
            seconds = int(pushback) / 1000
        except (ValueError, OverflowError):
            return None
        return seconds if seconds >= 0 else None
    info = found.get(RETRY_INFO_KEY)
    if isinstance(info, bytes):
        retry = RetryInfo()
        try:
            retry.ParseFromString(info)
        except Exception:  # protobuf's DecodeError: a malformed trailer names no delay
            return None
        delay = retry.retry_delay.ToNanoseconds() / 1e9
        return delay if delay >= 0 else None
    return None


class _Recording:
    """An SDK OTLP/gRPC exporter whose channel reports each call's status code.

    The transport owns retries, so the exporter retries nothing itself (no status code
    is retryable for it); the recorder tells the transport whether a failure may pass.
    """

    _stub: Any

    def __init__(self, recorder: StatusRecorder, **kwargs: Any) -> None:
        self._recorder = recorder
        super().__init__(retryable_error_codes=(grpc.StatusCode.OK,), **kwargs)

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()
        self._recorder.tls, self._recorder.target = not self._insecure, self._endpoint
        self._channel = grpc.intercept_channel(self._channel, self._recorder)
        self._client = self._stub(self._channel)


class RecordingExporter(_Recording, OTLPMetricExporter):
    """``OTLPMetricExporter`` (``MetricsService/Export``) with its calls' status recorded."""


class _EncodedRequest:
    """Hands an already encoded request to ``Export`` as it is (the sink encoded it)."""

    def _translate_data(self, data: Any) -> Any:
        return data

    def _count_data(self, data: Any) -> int:
        return 1


class RecordingSpanExporter(_Recording, _EncodedRequest, OTLPSpanExporter):
    """``TraceService/Export`` of an encoded ``ExportTraceServiceRequest``, status recorded."""


class RecordingLogExporter(_Recording, _EncodedRequest, OTLPLogExporter):
    """``LogsService/Export`` of an encoded ``ExportLogsServiceRequest``, status recorded."""


class _ThreadsFilter(logging.Filter):
    """Silences the exporter's per-attempt error log on threads named ``prefix...``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not threading.current_thread().name.startswith(self.prefix)


def silence_exporter_log_on(thread_prefix: str) -> None:
    """Drop the OTLP exporter's per-attempt error logs on these threads (they log once)."""
    logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").addFilter(
        _ThreadsFilter(thread_prefix)
    )


def channel_credentials(tls: OtlpTlsConfig) -> grpc.ChannelCredentials:
    """gRPC TLS credentials from ``otlp.tls``: the CA to trust, the client cert and key."""

    def read(path: str | None) -> bytes | None:
        return Path(path).read_bytes() if path else None

    return grpc.ssl_channel_credentials(read(tls.ca_file), read(tls.key_file), read(tls.cert_file))


def grpc_channel(endpoint: str, *, insecure: bool, tls: OtlpTlsConfig | None) -> grpc.Channel:
    """A channel to ``endpoint`` (``host:port`` or ``http(s)://host:port``): TLS with
    ``tls``'s files when given, TLS with the system's roots for ``https://`` or when not
    ``insecure``, else plaintext."""
    url = urlparse(endpoint)
    target = url.netloc or endpoint
    if tls is not None:
        return grpc.secure_channel(target, channel_credentials(tls))
    if url.scheme == "https" or not insecure:
        return grpc.secure_channel(target, grpc.ssl_channel_credentials())
    return grpc.insecure_channel(target)
