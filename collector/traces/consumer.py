"""The collector's trace consumer: every accepted trace request into each run's merged
timeline, the span duration histograms and the forward queue.

:class:`TraceMerge` is a ``SignalConsumer`` (:mod:`collector.signal_service`): the trace service
calls :meth:`TraceMerge.consume` with each request it accepted, from its gRPC
threads. Nothing here raises into the service: a span that cannot be read (an attribute over
the ``limits`` section's bounds) or a run that cannot be opened (a name that is no
directory, past ``max_runs``) is counted and logged once per kind; a file that cannot be
written is the run timeline's to log and count.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.traces.chrome_file import ChromeTraceFile
from collector.traces.config import TracesConfig
from collector.traces.durations import DurationWindows, RunFigures
from collector.traces.forward import ForwardStats, TraceForwarder
from collector.traces.spans import SpanView, read_spans
from collector.traces.timeline import RunTimeline, TimelineStats
from telemetry.config import LabelLimits
from telemetry.model.run import RunKey, run_name
from telemetry.model.snapshot import Snapshot, Step
from telemetry.otlp.values import UNLIMITED, Rejected

__all__ = ["Deliver", "TraceMerge", "TraceStats"]

logger = logging.getLogger(__name__)

Deliver = Callable[[Snapshot, Callable[[Step | None], Snapshot | None]], bool]
"""``(snapshot, figures_at) -> kept``: the shared sinks get ``snapshot``, the run's
step-based sinks ``figures_at(latest step)`` (:meth:`collector.pipeline.Pipeline.deliver`)."""


@dataclass(frozen=True, slots=True)
class TraceStats:
    """Spans received, spans rejected (unreadable or no run), and each run's timeline."""

    spans: int
    rejected: int
    runs: dict[str, TimelineStats]
    forward: ForwardStats | None


class TraceMerge:
    """Merged timelines, duration histograms and forwarding from one ``traces`` section.

    Args:
        config: the ``traces`` section.
        run_dir: ``(experiment, trial) -> run directory``; raises ``ValueError`` (a
            ``ConfigError``) for a name that is no directory.
        deliver: where the duration histograms go; None: nowhere.
        limits: the bounds on span attributes (the collector's ``limits`` section).
        max_runs: runs with a timeline at most; spans of further runs are counted rejected.
    """

    def __init__(
        self,
        config: TracesConfig,
        run_dir: Callable[[str, str], Path],
        deliver: Deliver | None = None,
        limits: LabelLimits = UNLIMITED,
        max_runs: int = 32,
    ) -> None:
        self.config = config
        self._run_dir = run_dir
        self._deliver = deliver if config.durations else None
        self._limits = limits
        self._max_runs = max_runs
        self._durations = DurationWindows(config.duration_buckets)
        self.forwarder = TraceForwarder(config.forward) if config.forward.enabled else None
        self._lock = threading.Lock()
        self._timelines: dict[RunKey, RunTimeline | None] = {}
        self._figures: dict[RunKey, RunFigures] = {}
        self._spans = self._rejected = 0
        self._logged: set[str] = set()

    def consume(self, request: ExportTraceServiceRequest) -> None:
        """Forward ``request``, write its spans into their runs' timelines and deliver their
        duration histograms. Never raises."""
        try:
            self._consume(request)
        except Exception:  # a bug must cost one request's spans, never the service
            logger.exception("traces: a request's spans were lost")

    def _consume(self, request: ExportTraceServiceRequest) -> None:
        if self.forwarder is not None:
            self.forwarder.submit(request.SerializeToString())
        by_run: dict[RunKey, list[SpanView]] = {}
        rejected = 0
        for item in read_spans(request, self._limits):
            if isinstance(item, Rejected):
                rejected += 1
                self._log_once("rejected", "traces: span rejected: %s", item)
                continue
            by_run.setdefault(item.run, []).append(item)
        read = sum(len(spans) for spans in by_run.values())
        for run, spans in list(by_run.items()):
            if self.config.merged_file:
                timeline = self._timeline(run)
                if timeline is None:  # no directory or past max_runs: nothing of it kept
                    rejected += len(by_run.pop(run))
                    continue
                timeline.add(spans)
        for timeline in self._open_timelines():
            timeline.expire()  # a run that went quiet writes what waited past hold_s
        with self._lock:
            self._spans += read
            self._rejected += rejected
        if self._deliver is not None:
            for window in self._durations.windows(s for spans in by_run.values() for s in spans):
                figures = self._figures_of(window.run)
                if figures is None:
                    continue
                figures.add(window)
                try:
                    self._deliver(window.snapshot(), figures.at_step)
                except Exception as exc:  # a run whose sinks cannot start: the file still has them
                    self._log_once("durations", "traces: span durations not delivered: %s", exc)

    def _figures_of(self, run: RunKey) -> RunFigures | None:
        with self._lock:
            figures = self._figures.get(run)
            if figures is None and len(self._figures) < self._max_runs:
                figures = self._figures[run] = RunFigures(run, self._durations.bounds)
            return figures

    def _timeline(self, run: RunKey) -> RunTimeline | None:
        with self._lock:
            if run in self._timelines:
                return self._timelines[run]
            if len(self._timelines) >= self._max_runs:
                self._log_once("runs", "traces: run limit %d reached: %s", self._max_runs, run)
                return None
            label = run_name(*run)
            try:
                directory = Path(self._run_dir(*run))
            except ValueError as exc:
                self._log_once(f"run {label}", "traces: run %s has no directory: %s", label, exc)
                self._timelines[run] = None
                return None
            file = ChromeTraceFile(directory, self.config.rotate_steps, label)
            timeline = RunTimeline(file, self.config.hold_s, self.config.max_pending_spans)
            self._timelines[run] = timeline
            return timeline

    def _log_once(self, kind: str, message: str, *args: object) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            logger.error(message, *args)

    def _open_timelines(self) -> list[RunTimeline]:
        with self._lock:
            return [t for t in self._timelines.values() if t is not None]

    def flush(self) -> bool:
        """Write what waited past ``hold_s``; True when everything consumed so far is held
        for good: every span in its run's file (none waiting for its root) and nothing
        waiting to be forwarded. The durable journal acknowledges requests only then
        (:mod:`collector.signal_service`)."""
        timelines = self._open_timelines()
        for timeline in timelines:
            timeline.expire()
        forwarded = self.forwarder is None or not self.forwarder.stats().queued
        return forwarded and all(t.holds_all() for t in timelines)

    def stats(self) -> TraceStats:
        """A copy of the counters."""
        with self._lock:
            timelines = dict(self._timelines)
            spans, rejected = self._spans, self._rejected
        runs = {run_name(*run): t.stats() for run, t in timelines.items() if t is not None}
        forward = self.forwarder.stats() if self.forwarder is not None else None
        return TraceStats(spans, rejected, runs, forward)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Write every waiting span, close each run's file whole, drain the forward queue."""
        for timeline in self._open_timelines():
            timeline.flush()
        if self.forwarder is not None:
            self.forwarder.close(timeout_s)
