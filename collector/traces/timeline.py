"""One run's merged timeline: spans of every rank and worker, whole traces at a time.

A process ends a parent span after its children, so its exporter sends the children
first. A span whose trace's local root has not arrived yet waits (at most ``hold_s``, at
most ``max_pending`` spans per run); when the root arrives, the whole trace is written at
once, each thread's spans in start order (a parent before its children). Traces of one
thread end in the order they began, so each thread's events in the file are in start
order. A span that arrives after its root (it outlived its parent) is written at once; one
whose root never comes is written when its wait is over (``orphans``).

Where a process's spans reach a step later than its last one, a ``step N`` instant event
marks the first start of that step in the process. Spans of steps before the current part
(a late process after a rotation) go to the current part and are counted (``late``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from collector.traces.chrome_file import ChromeTraceFile
from collector.traces.events import metadata, pid_of, span_events, step_event
from collector.traces.spans import Process, SpanView
from exporters.otlp.failure_run import FailureRun

__all__ = ["RunTimeline", "TimelineStats"]

logger = logging.getLogger(__name__)

DONE_TRACES = 4096
"""Trace ids whose root was written, remembered for children that outlive their root."""


@dataclass(frozen=True, slots=True)
class TimelineStats:
    """What one run's timeline wrote and held."""

    spans: int
    orphans: int
    late: int
    pending: int
    failed: int
    parts: int


class RunTimeline:
    """The merged timeline of one run, written to ``file``.

    Args:
        file: the run's Chrome trace file.
        hold_s: how long a span waits for its trace's root.
        max_pending: spans waiting at most; past it the oldest traces are written.
        clock: monotonic seconds (a test's own clock).
    """

    def __init__(
        self,
        file: ChromeTraceFile,
        hold_s: float,
        max_pending: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.file = file
        self.hold_s = hold_s
        self.max_pending = max_pending
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: OrderedDict[bytes, tuple[float, list[SpanView]]] = OrderedDict()
        self._held = 0
        self._done: OrderedDict[bytes, None] = OrderedDict()
        self._steps: dict[Process, int] = {}
        self._written = self._orphans = self._late = self._failed = 0
        self._write_failures = FailureRun()

    def add(self, spans: Iterable[SpanView]) -> None:
        """Take one request's spans of this run; write the traces they complete."""
        with self._lock:
            now = self._clock()
            ready: list[SpanView] = []
            for span in spans:
                if span.local_root:
                    _, held = self._pending.pop(span.trace_id, (now, []))
                    self._held -= len(held)
                    ready.extend(held)
                    ready.append(span)
                    self._done[span.trace_id] = None
                    if len(self._done) > DONE_TRACES:
                        self._done.popitem(last=False)
                elif span.trace_id in self._done:
                    ready.append(span)
                else:
                    self._pending.setdefault(span.trace_id, (now, []))[1].append(span)
                    self._held += 1
            ready.extend(self._expired(now))
            self._write(ready)

    def expire(self) -> None:
        """Write the traces whose wait is over (or past ``max_pending``), as :meth:`add` does."""
        with self._lock:
            self._write(self._expired(self._clock()))

    def flush(self) -> None:
        """Write every waiting span (at shutdown), then close the file."""
        with self._lock:
            ready = self._expired(None)
            self._write(ready)
            self.file.close()

    def holds_all(self) -> bool:
        """True when every span taken so far is in the file (none waits for its root)."""
        with self._lock:
            return not self._pending

    def stats(self) -> TimelineStats:
        """A copy of the counters."""
        with self._lock:
            return TimelineStats(
                self._written, self._orphans, self._late, self._held, self._failed,
                self.file.parts,
            )  # fmt: skip

    def _expired(self, now: float | None) -> list[SpanView]:
        """Traces waited out (all of them when ``now`` is None), oldest first."""
        out: list[SpanView] = []
        while self._pending:
            trace_id, (since, held) = next(iter(self._pending.items()))
            if now is not None and now - since < self.hold_s and self._held <= self.max_pending:
                break
            del self._pending[trace_id]
            self._held -= len(held)
            self._orphans += len(held)
            out.extend(held)
        return out

    def _write(self, spans: list[SpanView]) -> None:
        if not spans:
            return
        try:
            self.file.open()
        except OSError as exc:
            self._failed_write(spans, exc)
            return
        if self.file.resumed_spans:
            spans = [s for s in spans if s.span_id.hex() not in self.file.resumed_spans]
        pids = {s.process: pid_of(s.process) for s in spans}
        spans.sort(key=lambda s: (pids[s.process], s.thread, s.start_ns, -s.end_ns))
        current = self.file.first_step
        parts: dict[int | None, list[SpanView]] = {}
        for span in spans:
            part = None if span.step is None else self.file.part_of(span.step)
            if part is not None and current is not None and part < current:
                self._late += 1
                part = None
            parts.setdefault(part, []).append(span)
        for part in sorted(parts, key=lambda p: -1 if p is None else p):
            self._append(parts[part], part, pids)

    def _failed_write(self, spans: list[SpanView], exc: OSError) -> None:
        self._failed += len(spans)
        if self._write_failures.failed(len(spans)):
            logger.error("traces: cannot write %s: %s", self.file.path, exc)

    def _append(self, spans: list[SpanView], part: int | None, pids: dict[Process, int]) -> None:
        events, named, threads = [], [], set()
        for span in spans:
            pid = pids[span.process]
            if (pid, span.thread) not in threads:
                threads.add((pid, span.thread))
                named.extend(metadata(span, pid))
            last = self._steps.get(span.process)
            if span.step is not None and (last is None or span.step > last):
                self._steps[span.process] = span.step
                events.append(step_event(span.step, span.start_ns, pid, span.thread))
            events.extend(span_events(span, pid))
        try:
            self.file.append(events, named, part)
        except OSError as exc:
            self._failed_write(spans, exc)
            return
        self._written += len(spans)
        end = self._write_failures.succeeded()
        if end is not None:
            logger.warning(
                "traces: writing %s again after %d failed writes of %d spans%s",
                self.file.path, end.failures, end.points, end.over(),
            )  # fmt: skip
