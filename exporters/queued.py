"""Queue, retry and timeout written once around every sink.

:class:`QueuedSink` gives one sink its own bounded queue and a named daemon worker:
``submit`` never blocks (a full queue drops the snapshot and counts it), each export runs
under a timeout on a separate call thread, so a sink that stalls is counted as failed and
abandoned (marked degraded) while the worker keeps draining its queue. Only
``ExportResult.FAILURE`` is retried, with exponential backoff. Whatever a sink raises,
``BaseException`` included (``SystemExit``, ``KeyboardInterrupt``), is caught, logged,
counted as failed and marks the sink degraded; the worker lives on. Only the interpreter's
own shutdown ends a worker. A :class:`Charge` travels with queued snapshots and releases
its bytes when the last sink is done with them.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from exporters.base import ExportResult, Sink
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)

T = TypeVar("T")


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


class Charge:
    """Bytes held while any sink still holds one request's snapshots; released once.

    Starts with one hold (the admitting caller's); every queued copy adds one.
    """

    __slots__ = ("_holds", "_lock", "_release", "nbytes")

    def __init__(self, nbytes: int, release: Callable[[int], None]) -> None:
        self.nbytes = nbytes
        self._release = release
        self._holds = 1
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self._holds += 1

    def done(self) -> None:
        """Drop one hold; the last one releases ``nbytes``."""
        with self._lock:
            self._holds -= 1
            last = self._holds == 0
        if last:
            self._release(self.nbytes)


class _Flush:
    """A flush request travelling through the queue behind earlier snapshots."""

    __slots__ = ("done", "ok", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.ok = False
        self.done = threading.Event()


class _Stalled(Exception):
    """A sink call did not finish within its timeout; it keeps running, abandoned."""


class _Degraded(Exception):
    """An abandoned call is still running; the sink is not entered concurrently."""


class QueuedSink:
    """One sink behind a bounded queue, a worker thread, a per-export timeout and retries.

    Args:
        sink: the sink to drive; ``export`` is only ever called from one thread at a time.
        queue_size: snapshots waiting at most; more are dropped and counted.
        timeout_s: seconds one export may take before it is abandoned and counted failed.
        max_retries: retries of an export that returned ``ExportResult.FAILURE``.
        backoff_s: first retry delay; doubles per retry up to ``max_backoff_s``.
        max_backoff_s: the longest delay between two retries.
        name: label for stats and thread names; defaults to ``sink.name``.

    Raises:
        ValueError: ``queue_size`` < 1, ``timeout_s`` <= 0 or ``max_retries`` < 0.
    """

    def __init__(
        self,
        sink: Sink,
        queue_size: int = 1024,
        timeout_s: float = 10.0,
        *,
        max_retries: int = 3,
        backoff_s: float = 0.05,
        max_backoff_s: float = 1.0,
        name: str | None = None,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.sink = sink
        self.name = name or getattr(sink, "name", type(sink).__name__)
        self.queue_size = queue_size
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._exported = self._failed = self._dropped = self._retried = self._timed_out = 0
        self._last_latency: float | None = None
        self._init_state()

    def _init_state(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._queue: deque[tuple[Snapshot, Charge | None] | _Flush] = deque()
        self._depth = 0  # snapshots in the queue
        self._reserved = 0  # slots promised to admitted requests, not yet filled
        self._closed = False
        self._drain_deadline: float | None = None
        self._wake = threading.Event()  # cuts a retry backoff short on shutdown
        self._stalled: threading.Thread | None = None
        self._worker: threading.Thread | None = None
        self._streak = 0  # consecutive failed snapshots: degraded while > 0
        self._failure_kind = ""
        self._shutdown_done = False

    # -- caller side -------------------------------------------------------------------

    def submit(
        self, snapshot: Snapshot, charge: Charge | None = None, reserved: bool = False
    ) -> bool:
        """Queue ``snapshot`` without blocking; False (and counted) when full or closed.

        Args:
            snapshot: the snapshot to export.
            charge: held while the snapshot is queued or exported.
            reserved: fill a slot taken by :meth:`reserve` (never refused for space).
        """
        with self._lock_after_fork():
            if reserved and self._reserved > 0:
                self._reserved -= 1
            elif self._depth + self._reserved >= self.queue_size:
                self._dropped += 1
                return False
            if self._closed:
                self._dropped += 1
                return False
            if charge is not None:
                charge.hold()
            self._queue.append((snapshot, charge))
            self._depth += 1
            self._ensure_worker()
            self._cond.notify()
            return True

    def reserve(self, n: int) -> int | None:
        """Take ``n`` queue slots for an admitted request; None when they are not free.

        An empty queue always takes one request, however large. A degraded sink takes
        everything and reserves nothing (0): what its queue cannot hold is dropped and
        counted, so a failing sink never makes the collector refuse.
        """
        with self._lock_after_fork():
            if self._closed:
                return None
            if self._is_degraded():
                return 0
            used = self._depth + self._reserved
            if used and used + n > self.queue_size:
                return None
            self._reserved += n
            return n

    def release(self, n: int) -> None:
        """Give back reserved slots that were not filled."""
        with self._cond:
            self._reserved = max(0, self._reserved - n)

    def _is_degraded(self) -> bool:
        return self._streak > 0 or (self._stalled is not None and self._stalled.is_alive())

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued before this call was exported, then flush the sink.

        Returns:
            True when the queue drained and the sink's ``force_flush`` returned True in time.
        """
        marker = self._request_flush(timeout_s)
        return marker is not None and marker.done.wait(timeout_s) and marker.ok

    def _request_flush(self, timeout_s: float) -> _Flush | None:
        with self._lock_after_fork():
            if self._closed:
                return None
            marker = _Flush(timeout_s)
            self._queue.append(marker)  # control items may exceed queue_size
            self._ensure_worker()
            self._cond.notify()
            return marker

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop accepting snapshots; the worker drains until ``timeout_s`` from now."""
        with self._lock_after_fork():
            if self._closed:
                return
            self._closed = True
            self._drain_deadline = time.monotonic() + timeout_s
            self._cond.notify_all()
        self._wake.set()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Drain the queue with a deadline, then shut the sink down; safe to call twice.

        Snapshots still queued at the deadline are dropped and counted.
        """
        deadline = time.monotonic() + timeout_s
        self.close(timeout_s)
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            if self._shutdown_done:
                return
            self._shutdown_done = True
            left = [item for item in self._queue if not isinstance(item, _Flush)]
            self._dropped += len(left)
            self._queue.clear()
            self._depth = 0
            stalled = self._stalled
        for _, charge in left:
            if charge is not None:
                charge.done()
        if stalled is not None:
            # A slow export abandoned earlier may still finish within the deadline; the
            # sink must still be shut down then (a W&B/SwanLab run left open is incomplete).
            stalled.join(max(0.0, deadline - time.monotonic()))
        remaining = max(0.05, deadline - time.monotonic())
        try:
            self._call(lambda: self.sink.shutdown(remaining), remaining)
        except BaseException as exc:  # a sink's shutdown failing must not reach the caller
            _reraise_at_exit(exc)
            logger.warning("sink %s: shutdown raised %s: %s", self.name, type(exc).__name__, exc)

    def stats(self) -> SinkStats:
        """A consistent copy of this sink's counters."""
        with self._cond:
            return SinkStats(
                name=self.name,
                exported=self._exported,
                failed=self._failed,
                dropped=self._dropped,
                retried=self._retried,
                timed_out=self._timed_out,
                queue_depth=self._depth,
                last_latency_s=self._last_latency,
                degraded=self._is_degraded(),
            )

    def _lock_after_fork(self) -> threading.Condition:
        if self._pid != os.getpid():  # the parent's threads and queue do not exist here
            self._init_state()
        return self._cond

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._run, name=f"rltel-sink-{self.name}", daemon=True
            )
            self._worker.start()

    # -- worker side -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                return self._drain()
            except BaseException as exc:  # a bug of ours: log it, keep draining
                _reraise_at_exit(exc)
                logger.exception("sink %s: worker error", self.name)

    def _drain(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                if self._drain_deadline is not None and time.monotonic() > self._drain_deadline:
                    return  # shutdown counts what is left as dropped
                item = self._queue.popleft()
                if not isinstance(item, _Flush):
                    self._depth -= 1
            if isinstance(item, _Flush):
                self._flush(item)
                continue
            snapshot, charge = item
            try:
                self._export(snapshot)
            finally:
                if charge is not None:
                    charge.done()

    def _flush(self, marker: _Flush) -> None:
        try:
            marker.ok = bool(
                self._call(lambda: self.sink.force_flush(marker.timeout_s), marker.timeout_s)
            )
        except _Degraded:
            pass  # an abandoned export is still running; the flush fails
        except BaseException as exc:
            _reraise_at_exit(exc)
            logger.warning("sink %s: force_flush raised %s: %s", self.name, type(exc).__name__, exc)
        finally:
            marker.done.set()

    def _export(self, snapshot: Snapshot) -> None:
        delay = self.backoff_s
        for attempt in range(self.max_retries + 1):
            start = time.monotonic()
            try:
                result = self._call(
                    lambda: self.sink.export(snapshot, self.timeout_s), self.timeout_s
                )
            except _Degraded:
                self._failure("still stalled in an earlier call")
                return
            except _Stalled:
                self._count(timed_out=1)
                self._failure(f"stalled past {self.timeout_s:.3g}s; call abandoned")
                return
            except BaseException as exc:  # SystemExit too: a sink must not end the worker
                _reraise_at_exit(exc)
                self._failure(f"raised {type(exc).__name__}: {exc}", type(exc).__name__)
                return
            if result is ExportResult.SUCCESS:
                self._count(exported=1, latency=time.monotonic() - start)
                with self._cond:
                    streak, self._streak = self._streak, 0
                if streak:
                    logger.info("sink %s: recovered after %d failures", self.name, streak)
                return
            if result is not ExportResult.FAILURE or attempt == self.max_retries:
                break
            if self._wait_backoff(delay):
                break
            self._count(retried=1)
            delay = min(delay * 2, self.max_backoff_s)
        self._failure(f"returned {result}")

    def _failure(self, why: str, kind: str = "") -> None:
        """Count one failed snapshot; log the first of a run of failures, and each new kind."""
        with self._cond:
            self._failed += 1
            self._streak += 1
            new = self._streak == 1 or kind != self._failure_kind
            self._failure_kind = kind
        if new:
            logger.warning("sink %s: export failed: %s (further failures counted)", self.name, why)

    def _wait_backoff(self, delay: float) -> bool:
        """Sleep ``delay`` unless shutdown's drain deadline comes first; True means give up."""
        end = time.monotonic() + delay
        self._wake.wait(delay)  # set by close(): re-check the deadline at once
        deadline = self._drain_deadline
        if deadline is not None and end > deadline:
            return True
        time.sleep(max(0.0, end - time.monotonic()))
        return False

    def _call(self, fn: Callable[[], T], timeout_s: float) -> T:
        """Run ``fn`` on a call thread; raise :class:`_Stalled` if it outlives ``timeout_s``.

        While an abandoned call is still running the sink is degraded: further calls fail
        at once instead of entering the sink concurrently.
        """
        if self._stalled is not None:
            if self._stalled.is_alive():
                raise _Degraded
            self._stalled = None
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=target, name=f"rltel-sink-{self.name}-call", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            self._stalled = thread
            raise _Stalled
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _count(
        self,
        *,
        exported: int = 0,
        failed: int = 0,
        retried: int = 0,
        timed_out: int = 0,
        latency: float | None = None,
    ) -> None:
        with self._cond:
            self._exported += exported
            self._failed += failed
            self._retried += retried
            self._timed_out += timed_out
            if latency is not None:
                self._last_latency = latency


def _reraise_at_exit(exc: BaseException) -> None:
    """Re-raise ``exc`` only while the interpreter itself is shutting down."""
    if sys.is_finalizing():
        raise exc
