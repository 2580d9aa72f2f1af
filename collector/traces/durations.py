"""Span durations per phase and role as histograms in the run's metrics.

Each request's spans become, per run and role, one snapshot holding a histogram window per
phase (the span's name): count, sum, min, max and bucket counts of the durations in
seconds. The Prometheus sink accumulates the windows into
``rltel_span_duration_seconds{experiment,trial,role,phase}`` (``_bucket``, ``_count``,
``_sum``); the run's W&B, SwanLab, TensorBoard and console sinks get, once per training step
of the run, the windows received since the last time, as
``rltel/role_<role>/phase_<phase>/span_duration/avg|min|max`` (:class:`RunFigures`).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from collector.traces.spans import SpanView
from telemetry.model import names
from telemetry.model.run import RunKey
from telemetry.model.snapshot import Histogram, Snapshot, Step

__all__ = ["METRIC", "SERVICE", "DurationWindows", "RoleWindow", "RunFigures"]

METRIC = "rltel/span_duration"
"""Prometheus: ``rltel_span_duration_seconds``."""
SERVICE = "rltel-traces"
"""The ``job`` of the duration series (``service.name`` of their resource)."""
PHASE = "phase"


@dataclass(slots=True)
class _PhaseDurations:
    """One phase's span durations: bucket counts, count, sum, shortest and longest."""

    buckets: list[int]
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")

    def merge(self, other: _PhaseDurations) -> None:
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.count += other.count
        self.total += other.total
        self.low, self.high = min(self.low, other.low), max(self.high, other.high)

    def point(self, phase: str, bounds: tuple[float, ...]) -> Histogram:
        return Histogram(
            METRIC, self.count, self.total, self.low, self.high, bounds, tuple(self.buckets),
            unit="s", attributes=((PHASE, phase),),
        )  # fmt: skip


@dataclass(slots=True)
class RoleWindow:
    """One run's and role's duration windows of one request, by phase."""

    run: RunKey
    role: str
    bounds: tuple[float, ...]
    phases: dict[str, _PhaseDurations] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        window = self.phases.get(phase)
        if window is None:
            window = self.phases[phase] = _PhaseDurations([0] * (len(self.bounds) + 1))
        window.buckets[bisect.bisect_left(self.bounds, seconds)] += 1
        window.count += 1
        window.total += seconds
        window.low = min(window.low, seconds)
        window.high = max(window.high, seconds)

    def snapshot(self) -> Snapshot:
        """The shared sinks' snapshot: ``role`` in the resource, ``phase`` a point attribute."""
        resource = (
            ("service.name", SERVICE),
            (names.EXPERIMENT, self.run[0]),
            (names.TRIAL, self.run[1]),
            (names.ROLE, self.role),
        )
        points = tuple(w.point(phase, self.bounds) for phase, w in sorted(self.phases.items()))
        return Snapshot(points, resource=resource, stream="traces")


class RunFigures:
    """One run's duration windows for its step-based sinks: every window added since the
    last snapshot, handed out once per training step of the run (W&B and SwanLab keep one
    value of a key per step), with the role a point attribute (those sinks key series by
    name only). The windows added after the run's last step are not handed out (at
    shutdown); Prometheus has them.
    """

    def __init__(self, run: RunKey, bounds: tuple[float, ...]) -> None:
        self.run = run
        self.bounds = bounds
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], _PhaseDurations] = {}  # (role, phase) -> window
        self._last: int | None = None  # the global step last handed out

    def add(self, window: RoleWindow) -> None:
        with self._lock:
            for phase, part in window.phases.items():
                held = self._held.get((window.role, phase))
                if held is None:
                    held = self._held[window.role, phase] = _PhaseDurations([0] * len(part.buckets))
                held.merge(part)

    def at_step(self, step: Step | None) -> Snapshot | None:
        """The windows held, at ``step``, when it is a later step than the last one handed
        out; else None (they wait for the next step)."""
        with self._lock:
            if step is None or not self._held:
                return None
            if self._last is not None and step.global_step <= self._last:
                return None
            held, self._held, self._last = self._held, {}, step.global_step
        points = tuple(
            replace(w.point(phase, self.bounds), attributes=(("role", role), (PHASE, phase)))
            for (role, phase), w in sorted(held.items())
        )
        resource = (
            ("service.name", SERVICE),
            (names.EXPERIMENT, self.run[0]),
            (names.TRIAL, self.run[1]),
        )
        return Snapshot(points, step=step, resource=resource, stream="traces")


class DurationWindows:
    """Builds the duration windows of a request's spans.

    Args:
        bounds: bucket bounds in seconds, increasing.
    """

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(bounds)

    def windows(self, spans: Iterable[SpanView]) -> list[RoleWindow]:
        """One window per run and role that ``spans`` hold (instant events left out)."""
        out: dict[tuple[RunKey, str], RoleWindow] = {}
        for span in spans:
            if span.instant:
                continue
            key = (span.run, span.process.role)
            window = out.get(key)
            if window is None:
                window = out[key] = RoleWindow(span.run, span.process.role, self.bounds)
            window.add(span.name, span.duration_s)
        return list(out.values())
