"""Traces and logs through the OTLP sink: their requests, their spool form, the span exporter.

The OTLP sink's queue holds Snapshots (metrics, and their samples as a logs request sent
after the metrics) and :class:`SignalRequest` items: an encoded trace or logs request that
the sender hands to ``TraceService/Export`` or ``LogsService/Export``. Spans come in
through :class:`QueueSpanExporter` (``OtlpSink.span_exporter()``), an OpenTelemetry SDK
``SpanExporter`` that encodes a batch with the SDK's own encoder (``encode_spans``) and
queues it without blocking, so a ``BatchSpanProcessor`` in front of it never waits on the
network: the queue's retry, backoff, pushback and spool carry it as they carry metrics.

In the spool a signal request is a JSON entry of format 2 (``{"format": 2, "signal":
"traces", "items": 12, "request": <base64 of the protobuf>}``) in a record counted
``<items>.<signal>`` (:mod:`exporters.otlp.spool`); metric batches keep format 1. The
entry files of a spool written by an earlier version (``<seq>-<items>.<signal>.json``)
are read first.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from telemetry.model.snapshot import Snapshot
from telemetry.otlp.samples import encode_samples

__all__ = [
    "SIGNAL_FORMAT",
    "QueueSpanExporter",
    "Signal",
    "SignalRequest",
    "logs_request",
    "signal_from_json",
    "signal_to_json",
]

logger = logging.getLogger(__name__)

Signal = Literal["traces", "logs"]
SIGNAL_FORMAT = 2
_MESSAGES = {"traces": ExportTraceServiceRequest, "logs": ExportLogsServiceRequest}
ITEM_NAMES = {"traces": "spans", "logs": "log_records"}
"""Signal -> the name of its items in the sink's health counters."""


@dataclass(frozen=True, slots=True, eq=False)
class SignalRequest:
    """One encoded trace or logs request, as queued, spooled and sent.

    Attributes:
        signal: ``traces`` or ``logs``.
        request: the ``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest``.
        items: the spans or log records it holds.
    """

    signal: Signal
    request: ExportTraceServiceRequest | ExportLogsServiceRequest
    items: int

    @property
    def num_points(self) -> int:
        """Metric data points: none (the metrics counters leave a signal request out)."""
        return 0


def logs_request(snapshot: Snapshot) -> SignalRequest | None:
    """``snapshot``'s samples as a logs request, None when it holds none."""
    if not snapshot.samples:
        return None
    return SignalRequest("logs", encode_samples(snapshot), len(snapshot.samples))


def signal_to_json(part: SignalRequest) -> str:
    """The spool record of ``part``."""
    payload = base64.b64encode(part.request.SerializeToString()).decode("ascii")
    record = {"format": SIGNAL_FORMAT, "signal": part.signal, "items": part.items}
    return json.dumps({**record, "request": payload}, separators=(",", ":"))


def signal_from_json(data: dict) -> SignalRequest:
    """The request of a format 2 spool record (already parsed from JSON).

    Raises:
        ValueError: an unknown signal, or a payload that does not parse.
    """
    signal = data["signal"]
    message = _MESSAGES.get(signal)
    if message is None:
        raise ValueError(f"unknown signal {signal!r}")
    try:
        request = message.FromString(base64.b64decode(data["request"], validate=True))
    except Exception as exc:  # binascii.Error or protobuf's DecodeError
        raise ValueError(f"unreadable {signal} request: {exc}") from None
    return SignalRequest(signal, request, int(data["items"]))


class QueueSpanExporter(SpanExporter):
    """An OpenTelemetry ``SpanExporter`` that queues each batch in the OTLP sink's queue.

    ``export`` encodes the spans (the SDK's ``encode_spans``) and hands the request to the
    queue without blocking: SUCCESS when queued, FAILURE when the queue refused it (full or
    closed; the spans are counted as dropped in the sink's ``spans_dropped``). It never
    raises. ``shutdown`` stops it (later batches FAILURE); the queue is the sink's and
    closes with the StatsLogger.

    Args:
        submit: the queue's non-blocking submit (True when queued).
        flush: waits until what is queued is delivered (the queue's ``force_flush``).
    """

    def __init__(
        self, submit: Callable[[SignalRequest], bool], flush: Callable[[float], bool]
    ) -> None:
        self._submit = submit
        self._flush = flush
        self._closed = False
        self._failures = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Queue ``spans`` as one trace request; never blocks on the network, never raises."""
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            queued = self._submit(SignalRequest("traces", encode_spans(spans), len(spans)))
        except Exception as exc:  # an encoding bug costs this batch, never the caller
            self._failed(f"cannot encode {len(spans)} spans: {type(exc).__name__}: {exc}")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS if queued else SpanExportResult.FAILURE

    def _failed(self, why: str) -> None:
        with self._lock:
            self._failures += 1
            first = self._failures == 1
        if first:
            logger.warning("otlp: %s (further failures not logged)", why)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every span queued so far was delivered (or spooled); True when it was."""
        return bool(self._flush(timeout_millis / 1000))

    def shutdown(self) -> None:
        """Take no more batches; safe to call twice."""
        self._closed = True
