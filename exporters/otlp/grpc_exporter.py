"""The OTLP/gRPC exporter as the transport uses it: status codes recorded, TLS from files."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub

from telemetry.model.errors import ConfigError


class StatusRecorder(grpc.UnaryUnaryClientInterceptor):
    """Remembers the status code of the latest call made through its channel."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None

    def intercept_unary_unary(self, continuation, client_call_details, request):
        outcome = continuation(client_call_details, request)
        self.code = outcome.code()
        return outcome


class RecordingExporter(OTLPMetricExporter):
    """``OTLPMetricExporter`` whose channel reports each call's status code.

    The transport owns retries, so the exporter retries nothing itself (no status code
    is retryable for it); the recorder tells the transport whether a failure may pass.
    """

    def __init__(self, recorder: StatusRecorder, **kwargs: Any) -> None:
        self._recorder = recorder
        super().__init__(retryable_error_codes=(grpc.StatusCode.OK,), **kwargs)

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()
        self._channel = grpc.intercept_channel(self._channel, self._recorder)
        self._client = MetricsServiceStub(self._channel)


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


def channel_credentials(tls: dict) -> grpc.ChannelCredentials:
    """gRPC TLS credentials from ``otlp.tls`` (``ca_file``, ``cert_file``, ``key_file``).

    Raises:
        ConfigError: an unknown key.
    """
    unknown = sorted(set(tls) - {"ca_file", "cert_file", "key_file"})
    if unknown:
        raise ConfigError(f"unknown key stats_logger.otlp.tls.{unknown[0]}")

    def read(name: str) -> bytes | None:
        path = tls.get(name)
        return Path(path).read_bytes() if path else None

    return grpc.ssl_channel_credentials(read("ca_file"), read("key_file"), read("cert_file"))
