"""The counters of one queued sink, and its current run of failures."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field

__all__ = ["SinkStats"]


@dataclass(slots=True)
class SinkStats:
    """Counters of one queued sink: its queue counts into one (thread-safe), and hands out
    consistent copies of it (:meth:`copy`) that carry the queue's depth and health too.

    Attributes:
        name: the sink's name in stats, logs and ``/metrics``.
        exported: snapshots exported.
        failed: snapshots that failed.
        dropped: snapshots dropped (full or closed queue, or left at shutdown).
        retried: retries.
        timed_out: calls abandoned past their timeout.
        queue_depth: snapshots queued (in a copy).
        last_latency_s: the last successful export's seconds, or None.
        degraded: the sink fails or a stalled call still runs (in a copy).
        streak: consecutive failed snapshots (the sink is degraded while > 0).
        failing_since: when the current run of FAILURE answers began (monotonic), or None.
    """

    name: str
    exported: int = 0
    failed: int = 0
    dropped: int = 0
    retried: int = 0
    timed_out: int = 0
    queue_depth: int = 0
    last_latency_s: float | None = None
    degraded: bool = False
    streak: int = 0
    failing_since: float | None = None
    # what the current run of failures raised so far
    _kinds: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def add(self, *, dropped: int = 0, retried: int = 0, timed_out: int = 0) -> None:
        """Count snapshots dropped, retries, and calls abandoned past their timeout."""
        with self._lock:
            self.dropped += dropped
            self.retried += retried
            self.timed_out += timed_out

    def add_success(self, latency_s: float) -> int:
        """Count one exported snapshot; returns the run of failures it ends (0: none)."""
        with self._lock:
            self.exported += 1
            self.last_latency_s = latency_s
            streak, self.streak = self.streak, 0
            self.failing_since = None
        return streak

    def add_failure(self, kind: str = "") -> bool:
        """Count one failed snapshot; True when it starts a run of failures, or fails in a
        way new to this run (``kind``: what it raised), so that it is worth a log line: a
        run of failures logs once per way it fails, however they alternate."""
        with self._lock:
            self.failed += 1
            self.streak += 1
            if self.streak == 1:
                self._kinds = set()
            new = kind not in self._kinds
            self._kinds.add(kind)
        return new

    def failing(self) -> float:
        """When the current run of FAILURE answers began; starts one now if none runs."""
        with self._lock:
            if self.failing_since is None:
                self.failing_since = time.monotonic()
            return self.failing_since

    def copy(self, depth: int, degraded: bool) -> SinkStats:
        """A consistent copy of the counters, with the queue's ``depth`` and health."""
        with self._lock:
            return dataclasses.replace(self, queue_depth=depth, degraded=degraded)
