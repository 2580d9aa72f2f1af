"""Spans through the OpenTelemetry SDK, built off the caller's thread.

The recorder (:mod:`telemetry.tracing.recorder`) queues one plain tuple per ended span
(:data:`Record`); :class:`Replayer`'s thread (``rltel-trace-replay``) turns each into a span of
the SDK's tracer (``start_span(start_time=...)`` / ``end(end_time=...)``, its ids and parent
assigned by the recorder through :class:`_Assigned`, the SDK's ``IdGenerator`` interface),
from a ``TracerProvider`` of its own (never the global one) whose resource names the rank
and role. Ended spans go through :class:`BoundedBatch` (the SDK's ``BatchSpanProcessor``
with a bound) to the exporter: the Chrome trace file, or the OTLP sink's span exporter.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from telemetry.model import names, trace_names
from telemetry.tracing.drops import Drops
from telemetry.tracing.settings import TraceSettings

__all__ = ["BoundedBatch", "Record", "Replayer", "attributes"]

logger = logging.getLogger(__name__)

Record = tuple[Any, ...]
"""``(name, category, args, start_ns, end_ns, trace_id, span_id, parent_id, step,
thread_id, thread_name, exception, instant)``: one ended span as the recorder queues it."""

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _value(value: Any) -> Any:
    """An attribute value the SDK keeps: bool, int, float, str as they are, others as str."""
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def attributes(record: Record) -> dict[str, Any]:
    """A span's attributes: category, thread, step, each arg under ``rltel.args.``, the
    exception's type name, and the instant mark."""
    _, category, args, _, _, _, _, _, step, tid, thread_name, exception, instant = record
    out: dict[str, Any] = {
        trace_names.CATEGORY: category,
        trace_names.THREAD_ID: tid,
        trace_names.THREAD_NAME: thread_name,
    }
    if step is not None:
        out[trace_names.STEP] = _value(step)
    for key, value in (args or {}).items():
        out[trace_names.ARGS_PREFIX + str(key)] = _value(value)
    if exception is not None:
        out[trace_names.ARGS_PREFIX + "exception"] = exception
    if instant:
        out[trace_names.INSTANT] = True
    return out


class _Assigned(IdGenerator):
    """Hands the SDK the ids the recorder assigned (one replaying thread at a time)."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


class _Counted(SpanExporter):
    """Counts the spans handed to ``exporter`` (so :class:`BoundedBatch` knows its backlog)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.taken = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.taken += len(spans)
        return self.exporter.export(spans)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.exporter.shutdown()


class BoundedBatch(SpanProcessor):
    """The SDK's ``BatchSpanProcessor`` with at most ``max_queue`` spans waiting: a span
    over the bound is dropped and counted (logged once per change between dropping and
    not), so the SDK's own queue never overflows (it would log a warning per span)."""

    def __init__(self, exporter: SpanExporter, max_queue: int, delay_ms: int = 2000) -> None:
        self._counted = _Counted(exporter)
        self._max = max_queue
        self._batch = BatchSpanProcessor(
            self._counted,
            max_queue_size=max_queue + 1,
            schedule_delay_millis=delay_ms,
            max_export_batch_size=min(512, max_queue),
        )
        self.emitted = 0
        self.drops = Drops(
            logger,
            f"perf_tracer: {max_queue} spans waiting for export; dropping",
            "perf_tracer: export caught up (%d spans dropped)",
        )

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Nothing at start."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue ``span`` for export, or drop and count it when the queue is full."""
        if self.emitted - self._counted.taken >= self._max:
            self.drops.drop()
            return
        self.drops.kept()
        self.emitted += 1
        self._batch.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every queued span now (on the calling thread)."""
        return self._batch.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Export what is queued, then shut the exporter down."""
        self._batch.shutdown()

    def reset_after_fork(self) -> None:
        """The SDK empties its queue in a forked child: start counting afresh."""
        self.emitted, self._counted.taken = 0, 0


class Replayer:
    """The SDK side: provider, processor and the thread that replays queued records.

    Args:
        settings: rank, role, run names (the resource) and the export queue bound.
        exporter: where ended spans go.
        queue: the recorder's queue of :data:`Record` (appended by callers).
        delay_s: the thread replays at least this often.
    """

    def __init__(
        self, settings: TraceSettings, exporter: SpanExporter, queue: deque, delay_s: float = 1.0
    ) -> None:
        resource: dict[str, Any] = {"service.name": "rltel", names.RANK: settings.rank}
        if settings.role is not None:
            resource[names.ROLE] = settings.role
        if settings.experiment:
            resource[names.EXPERIMENT] = settings.experiment
        if settings.trial:
            resource[names.TRIAL] = settings.trial
        resource.update(settings.resource)
        self._ids = _Assigned()
        self.provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=Resource.create(resource),
            id_generator=self._ids,
            shutdown_on_exit=False,
        )
        self.processor = BoundedBatch(exporter, settings.max_queue)
        self.provider.add_span_processor(self.processor)
        self.exporter = exporter
        self._tracer = self.provider.get_tracer("rltel.perf_tracer")
        self._queue = queue
        self._delay_s = delay_s
        self.failures = 0
        self._failing = False
        self._closed = False
        self._start_thread()
        reference = weakref.WeakMethod(self._after_fork)
        os.register_at_fork(after_in_child=lambda: (method := reference()) and method())

    def _start_thread(self) -> None:
        self._lock = threading.Lock()
        self.wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rltel-trace-replay", daemon=True)
        self._thread.start()

    def _after_fork(self) -> None:
        self._queue.clear()
        self.processor.reset_after_fork()
        if not self._closed:
            self._start_thread()

    def _run(self) -> None:
        while not self._closed:
            self.wake.wait(self._delay_s)
            self.wake.clear()
            self.replay()

    def replay(self) -> None:
        """Turn every queued record into an ended SDK span (in queue order)."""
        with self._lock:
            queue, emit = self._queue, self._emit
            while queue:
                record = queue.popleft()
                try:
                    emit(record)
                except Exception as exc:  # a span we cannot build is counted, never raised
                    self.failures += 1
                    if not self._failing:  # logged once per change between failing and not
                        self._failing = True
                        logger.warning("perf_tracer: span %r not recorded (%r)", record[0], exc)
                    continue
                if self._failing:
                    self._failing = False
                    logger.warning("perf_tracer: spans recorded again (%d failed)", self.failures)

    def _emit(self, record: Record) -> None:
        name, _, _, start, end, trace_id, span_id, parent_id, *_ = record
        if parent_id:
            parent = SpanContext(trace_id, parent_id, is_remote=False, trace_flags=_SAMPLED)
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        else:
            context = otel_context.Context()
        self._ids.trace_id, self._ids.span_id = trace_id, span_id
        span = self._tracer.start_span(
            name, context=context, attributes=attributes(record), start_time=start
        )
        if record[11] is not None:
            span.set_status(Status(StatusCode.ERROR, record[11]))
        span.end(end_time=end)

    def flush(self) -> bool:
        """Replay what is queued and export every span now (on the calling thread)."""
        self.replay()
        return self.processor.force_flush()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread, replay what is left and shut the provider down (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.wake.set()
        self._thread.join(timeout_s)
        self.replay()
        self.provider.shutdown()
