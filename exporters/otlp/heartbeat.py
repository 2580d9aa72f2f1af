"""The reading rank's beats to the collector: one small OTLP request per beat, no queue.

A beat that cannot be sent is not kept (the next one replaces it): no queue, no spool, no
retry. The sender has its own gRPC channel to ``otlp.endpoint`` (its TLS, headers and
token, as the OTLP sink's), made on the caller's thread; each request waits at most the beat
interval (or ``otlp.timeout``, if shorter). It never raises: a failed beat is counted and
logged once per change of state, at INFO while the collector is down or refuses the
credentials (the OTLP sink warns about those, with their fix) and as a warning otherwise.
"""

from __future__ import annotations

import logging

from telemetry.config import StatsLoggerConfig
from telemetry.heartbeat.beat import BeatGroup
from telemetry.heartbeat.wire import snapshot_of

__all__ = ["OtlpBeats"]

_log = logging.getLogger(__name__)


class OtlpBeats:
    """Sends beat groups to the collector at ``config.otlp.endpoint``.

    Args:
        config: the StatsLogger's config (``otlp`` and ``heartbeat``).
    """

    def __init__(self, config: StatsLoggerConfig) -> None:
        from exporters.otlp.fork_safety import keep_forked_children_safe

        keep_forked_children_safe()  # before gRPC loads, as the OTLP sink
        import grpc
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import (
            MetricsServiceStub,
        )

        from exporters.otlp.grpc_exporter import grpc_channel
        from exporters.otlp.transport import AUTH_CODES, RETRYABLE_CODES
        from telemetry.otlp.encode import Batch, encode_batch

        otlp = config.otlp
        endpoint = str(otlp.endpoint)
        tls = otlp.tls if otlp.tls is not None and otlp.tls.enabled else None
        self._channel = grpc_channel(endpoint, insecure=otlp.insecure, tls=tls)
        self._export = MetricsServiceStub(self._channel).Export
        self._request = lambda group, closed: encode_metrics(
            encode_batch(Batch(snapshot_of(group, closed)))
        )
        self._metadata = tuple((k.lower(), v) for k, v in (otlp.plain_headers() or {}).items())
        self._timeout_s = min(otlp.timeout, config.heartbeat.interval_s)
        self._quiet = RETRYABLE_CODES | AUTH_CODES
        self._rpc_error = grpc.RpcError
        self.endpoint = endpoint
        self.sent = self.failures = 0
        self._failing: str | None = None

    def __call__(self, group: BeatGroup, closed: bool) -> None:
        """Send ``group``; when ``closed`` (the reader's last one) close the channel after.
        Never raises."""
        try:
            self._export(
                self._request(group, closed), timeout=self._timeout_s, metadata=self._metadata
            )
        except self._rpc_error as exc:
            self._failed(exc.code() if hasattr(exc, "code") else None)
        except Exception as exc:  # an encoding bug: the beat is lost, never the caller
            self._failed(None, f"{type(exc).__name__}: {exc}")
        else:
            self.sent += 1
            if self._failing is not None:
                _log.info(
                    "heartbeat: %s takes beats again after %d failed",
                    self.endpoint,
                    self.failures,
                )
                self._failing = None
        if closed:
            self._channel.close()

    def _failed(self, code, why: str | None = None) -> None:
        self.failures += 1
        state = why or getattr(code, "name", "closed")
        if state == self._failing:
            return
        self._failing = state
        level = logging.INFO if code in self._quiet else logging.WARNING
        _log.log(
            level,
            "heartbeat: %s did not take a beat (%s); beats are not kept, the next is sent as usual",
            self.endpoint,
            state,
        )
