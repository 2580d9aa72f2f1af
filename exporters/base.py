"""The sink contract: every sink takes frozen items (Snapshots, for all but the trace
forwarder's endpoint) and never raises into its caller."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Generic, TypeVar

from telemetry.model.snapshot import Snapshot

Item = TypeVar("Item")
"""What a sink takes: a :class:`Snapshot` (every sink of the registry), or serialized bytes
(:class:`collector.traces.forward.TraceEndpoint`)."""


class ExportResult(Enum):
    """Outcome of one ``Sink.export`` call."""

    SUCCESS = "success"
    FAILURE = "failure"  # retryable: a later attempt may succeed
    PERMANENT_FAILURE = "permanent_failure"  # retrying the same snapshot cannot help


@dataclass(frozen=True)
class Delivery:
    """A sink's own queue policy, used by the queue in front of it instead of the defaults.

    Attributes:
        queue_size: snapshots waiting in memory at most.
        timeout_s: seconds one call into the sink may take before it is abandoned.
        max_retries: retries of an export answered FAILURE (without an overflow).
        backoff_s: first retry delay; doubles per retry up to ``max_backoff_s``.
        max_backoff_s: the longest delay between two attempts.
        jitter: each delay is drawn from [delay / 2, delay] (many senders, one receiver).
        spill_after_s: with an overflow, how long failures last before the queue moves there.
    """

    queue_size: int
    timeout_s: float
    max_retries: int = 3
    backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    jitter: bool = False
    spill_after_s: float = 2.0


class Overflow(ABC):
    """Where a sink's queue puts what it cannot hold or deliver now: kept, replayed in order.

    The queue spills a snapshot (and everything queued after it) here when it fills up or
    the sink keeps failing, and replays the oldest entry before anything still queued.
    """

    @abstractmethod
    def __len__(self) -> int:
        """Entries waiting."""

    @abstractmethod
    def spill(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` at the tail; what does not fit is dropped and counted here."""

    @abstractmethod
    def replay(self, timeout_s: float) -> ExportResult:
        """Export the oldest entry; it is removed unless the answer is FAILURE."""


class Sink(ABC, Generic[Item]):
    """A destination for Snapshots (Prometheus, W&B, SwanLab, TensorBoard, console, OTLP), or
    for other items (``Sink[bytes]``: the trace forwarder's endpoint).

    ``export`` is called from one thread at a time, with a snapshot it must not mutate.
    ``shutdown`` is idempotent and safe on a sink that never exported; it may come while an
    export is still running on another thread (past the queue's deadline), and should end it.

    Every ability beyond ``export``, ``force_flush`` and ``shutdown`` is declared here, with
    a default that does nothing; a sink that has one overrides it, and the queue in front of
    a sink (:class:`~exporters.queued.QueuedSink`) and the collector use them without asking
    whether the sink has them. They live on the sink rather than on its factory because the
    queue holds only the sink: sinks built by hand (tests, the child process of a
    :class:`~exporters.child_sink.ChildSink`) have them too, and a sink whose ability depends
    on how it was built (OTLP has an overflow only with a spool) says so itself.

    Attributes:
        name: the sink's name in stats, logs and ``/metrics``.
        delivery: the sink's own queue policy (None: the queue's defaults).
        overflow: where the queue spills what it cannot hold or deliver now (None: none;
            OTLP's spool).
        settle_s: seconds after a successful ``force_flush`` until what the sink wrote is
            held (a tracker's own writer thread): the collector's journal is acknowledged
            only then.
        factory: the :class:`~exporters.factory.SinkFactory` that built the sink (None:
            built by hand; typed ``object`` because that module imports this one); sinks are
            found by it (:meth:`~exporters.fanout.FanOut.built_by`), never by name.
    """

    name: str = "sink"
    delivery: Delivery | None = None
    overflow: Overflow | None = None
    settle_s: float = 0.0
    factory: object | None = None

    @abstractmethod
    def export(self, snapshot: Item, timeout_s: float = 10.0) -> ExportResult:
        """Deliver one snapshot; return the outcome instead of raising for data faults."""

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Push out anything buffered; True when everything was written."""
        del timeout_s
        return True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Flush and release resources; safe to call twice."""
        self.force_flush(timeout_s)

    def attach(self, depth: Callable[[], int]) -> None:
        """Called once by the queue in front of the sink with a reader of its depth."""
        del depth

    def discard(self, snapshot: Item) -> None:
        """The queue gave ``snapshot`` up unexported (full, closed, out of retries or time);
        a sink that counts what it lost counts it here."""
        del snapshot

    def retry_after(self) -> float | None:
        """After a FAILURE answer, the delay the endpoint asked for before the next attempt
        (gRPC retry pushback); the queue waits at least that long. None: its own backoff."""
        return None

    def keep_in(self, directory: str | Path) -> None:
        """Keep what the sink holds undelivered at a clean shutdown in ``directory`` (the
        collector's durable state), and send first what an earlier process kept there."""
        del directory

    def skip_held_steps(self) -> None:
        """From now on skip what the sink's run already holds, so that a replay of the
        collector's journal never writes a step twice (where the sink can tell)."""
        return None


class RunSink(Sink[Snapshot]):
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


class InMemorySink(Sink[Snapshot]):
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
