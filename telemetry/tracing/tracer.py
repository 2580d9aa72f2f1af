"""``PerfTracer``: one configured process's tracer, AReaL's methods over OpenTelemetry spans.

Importing this module loads no OpenTelemetry code; building a tracer does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from telemetry.tracing.categories import CategoryLike, category_name
from telemetry.tracing.nulls import NULL_SCOPE, NullScope
from telemetry.tracing.sessions import SessionTracer
from telemetry.tracing.settings import TraceSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from telemetry.tracing.recorder import SpanScope
    from telemetry.tracing.timing import TimingSpans

__all__ = ["PerfTracer"]

logger = logging.getLogger(__name__)


class PerfTracer:
    """AReaL's ``PerfTracer`` surface recording spans (see :mod:`telemetry.tracing`).

    Args:
        settings: what to record and where (:func:`telemetry.tracing.settings.resolve`).
        exporter: where ended spans go; default: the per-rank Chrome trace file at
            ``settings.trace_path`` (embedded mode).
    """

    def __init__(self, settings: TraceSettings, exporter: SpanExporter | None = None) -> None:
        from telemetry.tracing.chrome import ChromeTraceFile
        from telemetry.tracing.recorder import Recorder
        from telemetry.tracing.timing import TimingSpans

        self.settings = settings
        self._enabled = settings.enabled
        if exporter is None:
            exporter = ChromeTraceFile(settings.trace_path, rank=settings.rank, role=settings.role)
        self.recorder = Recorder(settings, exporter)
        self._session_tracer = None
        if settings.session_path is not None:
            self._session_tracer = SessionTracer(
                settings.session_path,
                flush_threshold=settings.session_flush_threshold,
                rank=settings.rank,
                role=settings.role,
                recorder=self.recorder,
            )
        self._timing: TimingSpans | None = None
        if settings.record_timing:
            self._timing = TimingSpans(self.recorder)
            if self._enabled:
                self._timing.start()
        self._closed = False

    @property
    def enabled(self) -> bool:
        """Whether scopes and instants are recorded."""
        return self._enabled

    def set_enabled(self, flag: bool) -> None:
        """Start or stop recording scopes, instants and ``record_timing`` spans."""
        self._enabled = bool(flag)
        if self._timing is not None:
            self._timing.start() if self._enabled else self._timing.stop()

    @property
    def session_tracer(self) -> SessionTracer | None:
        """The session tracer, when session tracing is on."""
        return self._session_tracer

    def trace_scope(
        self,
        name: str,
        *,
        category: CategoryLike = None,
        enable_profiler: bool = False,
        profiler_args: dict[str, Any] | None = None,
        args: dict[str, Any] | None = None,
    ) -> SpanScope | NullScope:
        """A span around the block (``with``); ``enable_profiler`` and ``profiler_args``
        are accepted and ignored: rltel never starts torch's profiler."""
        if not self._enabled:
            return NULL_SCOPE
        return self.recorder.scope(name, category_name(category), args)

    atrace_scope = trace_scope
    """The same scope for ``async with``."""

    def instant(
        self, name: str, *, category: CategoryLike = None, args: dict[str, Any] | None = None
    ) -> None:
        """An instant event (a zero-length span)."""
        if self._enabled:
            self.recorder.instant(name, category_name(category), args)

    def save(self, *, step: int | None = None, force: bool = False) -> None:
        """Export the ended spans, where AReaL writes its file: at every ``save_interval``-th
        step (``(step + 1) % save_interval == 0``), with no step, or when ``force`` (which also
        writes every session, finished or not). With a step (the training loop's per-step
        call) the spans are handed to rltel's threads and this returns at once; without one,
        or with ``force``, they are exported before it returns."""
        if force and self._session_tracer is not None:
            self._session_tracer.flush(force=True)
        interval = self.settings.save_interval
        if not force and step is not None:
            if interval == 1 or (step + 1) % interval == 0:
                self.recorder.replayer.wake.set()
            return
        if not self.recorder.flush():
            logger.warning("perf_tracer: spans not all exported at save")

    def close(self) -> None:
        """Write every session, export every span and stop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._timing is not None:
            self._timing.stop()
        if self._session_tracer is not None:
            self._session_tracer.flush(force=True)
        self.recorder.close()

    def health(self) -> dict[str, int]:
        """Spans queued and dropped, sampler and write failure counts."""
        out = self.recorder.health()
        if self._timing is not None:
            out["timing_failures"] = self._timing.failures
        exporter = self.recorder.exporter
        for name in ("written_spans", "failed_spans"):  # the Chrome trace file's (embedded)
            if hasattr(exporter, name):
                out[name] = getattr(exporter, name)
        return out
