"""The sink contract: every sink takes frozen Snapshots and never raises into its caller."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from enum import Enum

from telemetry.model.snapshot import Snapshot


class ExportResult(Enum):
    """Outcome of one ``Sink.export`` call."""

    SUCCESS = "success"
    FAILURE = "failure"  # retryable: a later attempt may succeed
    PERMANENT_FAILURE = "permanent_failure"  # retrying the same snapshot cannot help


class Sink(ABC):
    """A destination for Snapshots (Prometheus, W&B, SwanLab, TensorBoard, console, ...).

    ``export`` is called from one thread at a time, with a snapshot it must not mutate.
    ``shutdown`` is idempotent and safe on a sink that never exported.
    """

    name: str = "sink"

    @abstractmethod
    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Deliver one snapshot; return the outcome instead of raising for data faults."""

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Push out anything buffered; True when everything was written."""
        del timeout_s
        return True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Flush and release resources; safe to call twice."""
        self.force_flush(timeout_s)


class RunSink(Sink):
    """A sink that owns one run or event file, finished exactly once by ``shutdown``.

    Subclasses set ``self._lock`` and ``self._closed = False`` in ``__init__``, say whether
    they write at all (:meth:`_active`, False when disabled by their config) and implement
    :meth:`_write` and :meth:`_finish`. ``export`` owns the guard: a disabled sink succeeds
    without writing, a closed one answers PERMANENT_FAILURE, and a failed write is logged
    and answered FAILURE.
    """

    _lock: threading.Lock
    _closed: bool

    @abstractmethod
    def _active(self) -> bool:
        """True when this sink writes (its run or file is open or was opened)."""

    @abstractmethod
    def _write(self, snapshot: Snapshot) -> None:
        """Write one snapshot (called under the lock, only while open)."""

    @abstractmethod
    def _finish(self) -> None:
        """Finish the run or close the file (called once, under the lock)."""

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Write one snapshot; FAILURE (logged) when the write fails."""
        del timeout_s
        with self._lock:
            if self._closed:
                return ExportResult.PERMANENT_FAILURE
            if not self._active():
                return ExportResult.SUCCESS
            try:
                self._write(snapshot)
            except Exception:
                logging.getLogger(type(self).__module__).exception(
                    "%s: writing the %s snapshot failed", self.name, snapshot.stream
                )
                return ExportResult.FAILURE
        return ExportResult.SUCCESS

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Finish the run so its files are complete; safe to call twice."""
        del timeout_s
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._finish()
            except Exception:
                logging.getLogger(type(self).__module__).exception(
                    "%s: finishing failed", self.name
                )


class InMemorySink(Sink):
    """Keeps every exported snapshot in a list: the test double of the sink contract."""

    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshots: list[Snapshot] = []
        self.shut_down = False

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        with self._lock:
            if self.shut_down:
                return ExportResult.PERMANENT_FAILURE
            self._snapshots.append(snapshot)
        return ExportResult.SUCCESS

    @property
    def snapshots(self) -> list[Snapshot]:
        """A copy of what was exported, in order."""
        with self._lock:
            return list(self._snapshots)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self.shut_down = True
