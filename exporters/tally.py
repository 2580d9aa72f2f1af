"""The counters of one queued sink, and its current run of failures."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["SinkStats", "Tally"]


@dataclass(frozen=True, slots=True)
class SinkStats:
    """Counters of one queued sink."""

    name: str
    exported: int
    failed: int
    dropped: int
    retried: int
    timed_out: int
    queue_depth: int
    last_latency_s: float | None
    degraded: bool


class Tally:
    """What happened to one sink's snapshots; thread-safe.

    Attributes:
        streak: consecutive failed snapshots (the sink is degraded while > 0).
        failing_since: when the current run of FAILURE answers began (monotonic), or None.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exported = self._failed = self._dropped = self._retried = self._timed_out = 0
        self._last_latency: float | None = None
        self._kinds: set[str] = set()  # what the current run of failures raised so far
        self.streak = 0
        self.failing_since: float | None = None

    def add(self, *, dropped: int = 0, retried: int = 0, timed_out: int = 0) -> None:
        """Count snapshots dropped, retries, and calls abandoned past their timeout."""
        with self._lock:
            self._dropped += dropped
            self._retried += retried
            self._timed_out += timed_out

    def succeeded(self, latency_s: float) -> int:
        """Count one exported snapshot; returns the run of failures it ends (0: none)."""
        with self._lock:
            self._exported += 1
            self._last_latency = latency_s
            streak, self.streak = self.streak, 0
            self.failing_since = None
        return streak

    def failed(self, kind: str = "") -> bool:
        """Count one failed snapshot; True when it starts a run of failures, or fails in a
        way new to this run (``kind``: what it raised), so that it is worth a log line: a
        run of failures logs once per way it fails, however they alternate."""
        with self._lock:
            self._failed += 1
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

    def stats(self, name: str, depth: int, degraded: bool) -> SinkStats:
        """A consistent copy of the counters, with the queue's depth and health."""
        with self._lock:
            return SinkStats(
                name=name,
                exported=self._exported,
                failed=self._failed,
                dropped=self._dropped,
                retried=self._retried,
                timed_out=self._timed_out,
                queue_depth=depth,
                last_latency_s=self._last_latency,
                degraded=degraded,
            )
