"""The heartbeat thread: a named daemon that publishes this rank's beat every interval.

It imports nothing (the store and everything it calls were made on the caller's thread),
holds no lock the training loop takes, and never raises: a failing store is logged once
per change of state, with a count, and retried at the next beat. On the reading rank it
also keeps the latest beats of every rank for the Prometheus endpoint and hands them to its
``emit`` (the collector's sender) at each beat.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable

from telemetry.heartbeat.beat import Beat, Progress
from telemetry.heartbeat.board import Board

__all__ = ["Heartbeat"]

_log = logging.getLogger(__name__)


class Heartbeat:
    """One rank's heartbeat.

    Args:
        board: where beats go (and, when ``reader``, come back from).
        rank: this rank.
        host: this host's name.
        interval_s: seconds between beats.
        reader: read every rank's beats at each beat (rank 0 of a job).
        emit: called on the heartbeat thread after each beat as ``emit(beats, closed)``
            with the beats read (``closed`` at the last beat, from :meth:`close`).
    """

    def __init__(
        self,
        board: Board,
        rank: int,
        host: str,
        interval_s: float,
        reader: bool,
        emit: Callable[[tuple[Beat, ...], bool], None] | None = None,
    ) -> None:
        self.progress = Progress()
        self.rank, self.host, self.reader = rank, host, reader
        self.failures = 0
        self._board, self._interval_s, self._emit = board, interval_s, emit
        self._beats: tuple[Beat, ...] = ()
        self._failing = False
        self._stop = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rltel-heartbeat", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def beats(self) -> tuple[Beat, ...]:
        """The latest beat of every rank this rank reads (its own when it reads none)."""
        return self._beats

    def _run(self) -> None:
        while True:
            self._beat(exited=False)
            if self._stop.wait(self._interval_s):
                return

    def _beat(self, exited: bool) -> None:
        try:
            beat = self.progress.beat(self.rank, self.host, exited)
            self._board.publish(beat)
            self._beats = tuple(self._board.read()) if self.reader else (beat,)
            if self._emit is not None:
                self._emit(self._beats, exited)
        except Exception as exc:  # a telemetry failure never reaches the training loop
            self.failures += 1
            if not self._failing:
                self._failing = True
                _log.warning("heartbeat of rank %d: %s (retried every beat)", self.rank, exc)
            return
        if self._failing:
            self._failing = False
            _log.warning("heartbeat of rank %d: back after %d failures", self.rank, self.failures)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and publish a last beat that says this rank exited cleanly; safe
        twice."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():  # stuck in a store call: the last beat would wait too
            _log.warning("heartbeat of rank %d: the store does not answer; no exit beat", self.rank)
            return
        self._beat(exited=True)
