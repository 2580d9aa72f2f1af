"""Traces and logs into the collector: ``TraceService/Export`` and ``LogsService/Export``
beside ``MetricsService/Export`` on the same port.

:class:`~collector.server.CollectorServer` runs all three through one gate: the bearer
token (UNAUTHENTICATED), ``receiver.max_message_bytes`` and ``limits.max_concurrent_requests``
(gRPC's RESOURCE_EXHAUSTED), the sender's deadline (DEADLINE_EXCEEDED), the heavy-request
gate and the memory budget (RESOURCE_EXHAUSTED with a retry delay). Past the gate a
:class:`SignalService` answers:

==================  ============================================================
OK                  every consumer was handed the request (with ``durable`` on, it
                    was in the signal's journal first)
INVALID_ARGUMENT    not an ``ExportTraceServiceRequest``/``ExportLogsServiceRequest``,
                    or more spans than ``limits.max_spans_per_request`` (log records
                    than ``limits.max_log_records_per_request``): split it
RESOURCE_EXHAUSTED  more spans/records than ``limits.heavy_request_points`` while
                    another heavy request is in, or the journal is full or cannot be
                    written (retry after the delay sent)
DEADLINE_EXCEEDED   the sender's deadline passed before the request was handed on
UNAVAILABLE         shutting down
==================  ============================================================

**Consumers.** Accepted requests go to consumers, each a :class:`SignalConsumer`:
``consume(request)``, ``flush()`` and ``shutdown(timeout_s)``. Register them where the server
is built: ``CollectorServer(config, trace_consumers=[...], log_consumers=[...])`` (``python -m
collector`` builds its server in :func:`collector.__main__.main`). Every consumer is called,
in order, on the gRPC thread of the request, which waits for them; a consumer keeps what it
needs (the request is the caller's again once it returns), must not block for long, and is
called from many threads at once. One that raises is logged (once per run of failures) and
counted; the others still get the request, and the sender gets OK. ``flush()`` returns True
when everything consumed so far is held for good (the durable journal is acknowledged only
after every consumer's flush says so); ``shutdown(timeout_s)`` is called when the server
stops, once by each service the consumer is registered with. Self-metrics per signal
(:mod:`collector.selfmetrics`): ``rltel_collector_signal_requests{signal,code}``,
``..._signal_items_accepted{signal}``, ``..._signal_items_refused{signal}``,
``..._signal_consumer_errors{signal}``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collector.config import LimitsConfig
from collector.refusals import Refused
from collector.signal_journal import SignalJournal

__all__ = [
    "LOGS",
    "TRACES",
    "SignalConsumer",
    "SignalService",
]

logger = logging.getLogger(__name__)


class SignalConsumer(Protocol):
    """Takes every request of one signal the collector accepted (see the module docstring)."""

    def consume(self, request: Message) -> None:
        """Keep what is needed of ``request`` (an ``ExportTraceServiceRequest`` from the trace
        service, an ``ExportLogsServiceRequest`` from the logs service); called from many gRPC
        threads at once."""

    def flush(self) -> bool:
        """True when everything consumed so far is held for good."""

    def shutdown(self, timeout_s: float) -> None:
        """Release what is held when the server stops (once per service registered with)."""


@dataclass(frozen=True)
class _SignalKind:
    """What differs between the trace and the logs service."""

    name: str  # traces, logs
    service: str  # the gRPC service's full name
    request: type[Message]
    response: type[Message]
    items: str  # what the request holds, for messages
    limit_key: str  # the limits key of the per-request cap
    count: Callable[[Any], int]


TRACES = _SignalKind(
    "traces",
    "opentelemetry.proto.collector.trace.v1.TraceService",
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
    "spans",
    "max_spans_per_request",
    lambda request: sum(
        len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans
    ),
)
LOGS = _SignalKind(
    "logs",
    "opentelemetry.proto.collector.logs.v1.LogsService",
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
    "log records",
    "max_log_records_per_request",
    lambda request: sum(
        len(scope.log_records)
        for resource in request.resource_logs
        for scope in resource.scope_logs
    ),
)


class _SignalConsumers:
    """Hands each request of one signal to every consumer, in order.

    A consumer that raises is logged at its first failure of a run (and when it works
    again) and counted; it loses that request, and the others still get it.

    Args:
        signal: the signal's name (``traces``, ``logs``), for messages.
        consumers: the consumers, called on the caller's thread.
    """

    def __init__(self, signal: str, consumers: Sequence[SignalConsumer]) -> None:
        self.signal = signal
        self.consumers = list(consumers)
        self._lock = threading.Lock()
        self._failing: dict[int, int] = {}  # consumer index -> failures in a row
        self._errors = 0

    @property
    def errors(self) -> int:
        """Consumer calls that raised."""
        with self._lock:
            return self._errors

    def consume(self, request: Message) -> None:
        """Call every consumer with ``request``; one that raises is logged and counted."""
        for index, consumer in enumerate(self.consumers):
            try:
                consumer.consume(request)
            except Exception as exc:  # one consumer's bug costs it this request, no more
                with self._lock:
                    self._errors += 1
                    failures = self._failing[index] = self._failing.get(index, 0) + 1
                if failures == 1:
                    logger.error(
                        "collector: %s consumer %s failed: %s: %s (repeats counted)",
                        self.signal,
                        type(consumer).__name__,
                        type(exc).__name__,
                        exc,
                    )
            else:
                if self._failing.get(index):
                    with self._lock:
                        failures = self._failing.pop(index, 0)
                    logger.warning(
                        "collector: %s consumer %s works again after %d failures",
                        self.signal,
                        type(consumer).__name__,
                        failures,
                    )

    def flush(self) -> bool:
        """Every consumer's ``flush()``; True when each holds what it consumed."""
        results = [bool(consumer.flush()) for consumer in self.consumers]
        return all(results)

    def shutdown(self, timeout_s: float) -> bool:
        """Shut every consumer down; False when one raised (what it held may be lost)."""
        clean = True
        for consumer in self.consumers:
            try:
                consumer.shutdown(timeout_s)
            except Exception:
                clean = False
                logger.exception("collector: %s consumer shutdown failed", self.signal)
        return clean


class SignalService:
    """One signal's ``Export`` past the server's gate: parse, bound, journal, consumers.

    Args:
        kind: :data:`TRACES` or :data:`LOGS`.
        consumers: handed every accepted request, in order.
        limits: the ``limits`` section (the per-request cap, ``heavy_request_points``).
        heavy: the server's heavy-request gate, shared with the metrics service.
    """

    def __init__(
        self,
        kind: _SignalKind,
        consumers: Sequence[SignalConsumer],
        limits: LimitsConfig,
        heavy: threading.Semaphore,
    ) -> None:
        self.kind = kind
        self.consumers = _SignalConsumers(kind.name, consumers)
        self.max_items: int = getattr(limits, kind.limit_key)
        self.heavy_items = limits.heavy_request_points
        self._heavy = heavy
        self._lock = threading.Lock()
        self._codes: Counter[str] = Counter()
        self._accepted = self._refused = 0
        self.journal: SignalJournal | None = None  # with durable on
        self._closed = False

    def ingest(self, data: bytes, expired: Callable[[], bool], heavy: bool) -> Message:
        """Parse ``data``, bound it and hand it on; the response, or :class:`Refused`."""
        kind = self.kind
        if self._closed:
            raise Refused(grpc.StatusCode.UNAVAILABLE, "the collector is shutting down")
        try:
            request = kind.request.FromString(data)
        except DecodeError as exc:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, f"not an {kind.request.__name__}: {exc}"
            ) from None
        items = kind.count(request)
        if items > self.max_items:
            self._count_refused(items)
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request has {items} {kind.items}; limits.{kind.limit_key} is "
                f"{self.max_items}: split it",
            )
        entered = not heavy and items > self.heavy_items
        if entered and not self._heavy.acquire(blocking=False):
            self._count_refused(items)
            raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many large requests", True)
        try:
            if expired():
                self._count_refused(items)
                raise Refused(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed; nothing kept")
            if self.journal is not None:
                try:
                    self.journal.accept(data, lambda: self.consumers.consume(request))
                except OSError as exc:
                    self._count_refused(items)
                    raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), True) from None
            else:
                self.consumers.consume(request)
        finally:
            if entered:
                self._heavy.release()
        with self._lock:
            self._accepted += items
        return kind.response()

    def recover(self, state_dir: Path, limit_bytes: int, fsync: bool) -> None:
        """Journal every request accepted from now on under ``state_dir`` (the durable
        state directory), and first hand the consumers, in order, what an earlier process
        accepted and they did not hold (:mod:`collector.signal_journal`).

        Raises:
            OSError: the journal's directory cannot be used.
        """
        self.journal = SignalJournal(state_dir, self.kind.name, limit_bytes, fsync, self.flush)
        replayed = self.journal.replay(self._replay)
        if replayed:
            logger.warning(
                "durable queue: %d %s requests of an earlier collector handed on again",
                replayed,
                self.kind.name,
            )

    def _replay(self, data: bytes) -> None:
        try:
            request = self.kind.request.FromString(data)
        except DecodeError as exc:  # a journal holds only requests that parsed
            logger.warning("durable queue: a %s record unreadable: %s", self.kind.name, exc)
            return
        self.consumers.consume(request)

    def flush(self) -> bool:
        """Every consumer's ``flush()``; True when each holds what it consumed."""
        return self.consumers.flush()

    def shutdown(self, timeout_s: float) -> None:
        """Refuse further requests, close the journal, shut every consumer down; once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        flushed = self.flush() if self.journal is not None else False
        if not self.consumers.shutdown(timeout_s):
            flushed = False  # what a consumer held may not be written: replayed next time
        if self.journal is not None:
            self.journal.close(flushed)

    def tally(self, code: str, size: int) -> None:
        """Count one answered request by its status code name."""
        del size
        with self._lock:
            self._codes[code] += 1

    def _count_refused(self, items: int) -> None:
        with self._lock:
            self._refused += items

    def counts(self) -> _SignalCounts:
        """A copy of this service's counters."""
        with self._lock:
            codes, accepted, refused = dict(self._codes), self._accepted, self._refused
        return _SignalCounts(codes, accepted, refused, self.consumers.errors)


@dataclass(frozen=True)
class _SignalCounts:
    """One signal service's counters: requests by status code name, spans or records
    accepted and refused, consumer calls that raised."""

    requests: dict[str, int]
    accepted: int
    refused: int
    consumer_errors: int
