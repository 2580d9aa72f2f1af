"""A run of repeated failures, so that it is logged once when it starts and once when it
ends (with how many failures and points it took), never once per failure.

An endpoint or disk that flaps (fails, recovers, fails again within ``quiet_s``) would
still log two lines per flap; a run that starts within ``quiet_s`` of the last logged end
is counted quietly instead, and logged only if it lasts ``quiet_s``. What quiet runs took is
added to the next logged end, so the counts in the log add up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["QUIET_S", "FailureRun", "FailureRunEnd"]

QUIET_S = 60.0


@dataclass(frozen=True)
class FailureRunEnd:
    """What the runs of failures since the last logged end took: ``failures`` calls of
    ``points`` data points, over ``runs`` runs."""

    failures: int
    points: int
    runs: int = 1

    def over(self) -> str:
        """``" over N runs"`` when quiet runs were merged into this one, else ``""``."""
        return f" over {self.runs} runs" if self.runs > 1 else ""


class FailureRun:
    """Counts consecutive failures of one kind and says which starts and ends to log.

    Args:
        quiet_s: a run starting this soon after the last logged end is not logged unless
            it lasts this long.
        clock: monotonic seconds (a test's own clock).
    """

    def __init__(
        self, quiet_s: float = QUIET_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.quiet_s = quiet_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = self._points = 0
        self._started = 0.0
        self._logged = False  # the current run's start was logged
        self._quiet = FailureRunEnd(0, 0, 0)  # what quiet runs took since the last logged end
        self._ended_at: float | None = None  # when the last logged run ended

    @property
    def failing(self) -> bool:
        """True between a failure and the next success."""
        with self._lock:
            return self._failures > 0

    def failed(self, points: int = 0) -> bool:
        """Count one failure (of ``points`` points); True when its run is to be logged now:
        at its start, or once a quiet run has lasted ``quiet_s``."""
        with self._lock:
            now = self._clock()
            self._failures += 1
            self._points += points
            if self._failures == 1:
                self._started = now
                recent = self._ended_at is not None and now - self._ended_at < self.quiet_s
                self._logged = not recent
                return self._logged
            if not self._logged and now - self._started >= self.quiet_s:
                self._logged = True
                return True
            return False

    def succeeded(self) -> FailureRunEnd | None:
        """End the run, if there was one: what it (and quiet runs before it) took when its
        start was logged (log it), else None (counted for the next logged end)."""
        with self._lock:
            if not self._failures:
                return None
            quiet = self._quiet
            end = FailureRunEnd(
                quiet.failures + self._failures, quiet.points + self._points, quiet.runs + 1
            )
            self._failures = self._points = 0
            if not self._logged:
                self._quiet = end
                return None
            self._quiet = FailureRunEnd(0, 0, 0)
            self._ended_at = self._clock()
            return end
