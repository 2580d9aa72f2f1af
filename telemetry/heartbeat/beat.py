"""One rank's heartbeat: what it is doing and when it last made progress, as plain data.

:class:`Progress` is written by the training thread at each commit (one tuple swap, no
lock) and read by the heartbeat thread, which builds a :class:`Beat` from it and from the
open ``record_timing`` phase (:mod:`telemetry.record.phase`).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import deque
from dataclasses import asdict, dataclass

from telemetry.record import phase

__all__ = ["Beat", "BeatGroup", "Progress"]

STEP_HISTORY = 64
"""Step intervals the median step time spans."""


@dataclass(frozen=True, slots=True)
class Beat:
    """A rank's state at one beat (times are unix seconds).

    ``phase`` is the innermost open ``record_timing`` scope ("" outside every scope) and
    ``phase_start`` when this rank entered it (or left its last scope); ``last_progress``
    the time of its last commit (its start before any); ``median_step_s`` the median
    interval between its commits (0 before two); ``exited`` 1 once it closed cleanly.
    """

    rank: int
    host: str
    step: int
    phase: str
    phase_start: float
    last_progress: float
    median_step_s: float
    sent: float
    exited: bool = False

    def encode(self) -> bytes:
        """The beat as the bytes the store holds."""
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Beat:
        """A beat from :meth:`encode`'s bytes.

        Raises:
            ValueError: the bytes are not a beat.
        """
        try:
            fields = json.loads(data)
            return cls(**fields)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a heartbeat: {data[:80]!r}") from exc


@dataclass(frozen=True, slots=True)
class BeatGroup:
    """The beats of one run's ranks as one reader sees them.

    ``run`` is ``(experiment, trial, role)``; ``stall_floor_s`` the run's
    ``heartbeat.stall_floor_s``; ``worker`` the reader's worker id (a rollout or eval
    worker's ``worker_id``; "" for a trainer's ranks).
    """

    run: tuple[str, str, str]
    stall_floor_s: float
    beats: tuple[Beat, ...]
    worker: str = ""


class Progress:
    """The step and progress time of this rank, written by its training thread."""

    def __init__(self) -> None:
        self._state = (-1, time.time())
        self._intervals: deque[float] = deque(maxlen=STEP_HISTORY)

    def advance(self, step: int) -> None:
        """The rank committed ``step`` now."""
        now = time.time()
        previous = self._state
        if previous[0] >= 0:
            self._intervals.append(now - previous[1])
        self._state = (int(step), now)

    def beat(self, rank: int, host: str, exited: bool = False) -> Beat:
        """This rank's beat now (called on the heartbeat thread)."""
        step, last = self._state
        name, since = phase.current()
        intervals = list(self._intervals)
        median = statistics.median(intervals) if intervals else 0.0
        return Beat(rank, host, step, name, since, last, median, time.time(), exited)
