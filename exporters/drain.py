"""The worker side of :class:`~exporters.queued.QueuedSink`: drain, retry, spill, replay.

One named daemon thread per queued sink takes snapshots in order and exports each under
the call timeout, retrying FAILURE answers with exponential backoff. With an overflow the
order is kept this way: everything in the overflow is older than everything queued, so
the worker replays the overflow's oldest entry before it takes from the queue, and a spill
moves the snapshot in hand first, then the queue, to the overflow's tail.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from exporters.base import ExportResult, Overflow, Sink
from exporters.calls import Busy, Stalled, TimedCaller, reraise_at_exit

if TYPE_CHECKING:
    from exporters.charge import Charge
    from telemetry.model.snapshot import Snapshot

__all__ = ["Drain", "Flush"]

logger = logging.getLogger("exporters.queued")

_WAITED, _GIVE_UP, _SPILLED = "waited", "give up", "spilled"


class Flush:
    """A flush request travelling through the queue behind earlier snapshots."""

    __slots__ = ("done", "ok", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.ok = False
        self.done = threading.Event()


class Drain:
    """The worker loop; :class:`~exporters.queued.QueuedSink` holds the state it reads."""

    sink: Sink
    name: str
    overflow: Overflow | None
    queue_size: int
    timeout_s: float
    max_retries: int
    backoff_s: float
    max_backoff_s: float
    jitter: bool
    spill_after_s: float
    _cond: threading.Condition
    _spill_lock: threading.Lock
    _queue: deque[tuple[Snapshot, Charge | None] | Flush]
    _depth: int
    _closed: bool
    _drain_deadline: float | None
    _caller: TimedCaller
    _streak: int
    _failure_kind: str
    _failing_since: float | None
    _give_up: bool
    _exported: int
    _failed: int
    _retried: int
    _timed_out: int
    _last_latency: float | None

    def _run(self) -> None:
        while True:
            try:
                return self._drain()
            except BaseException as exc:  # a bug of ours: log it, keep draining
                reraise_at_exit(exc)
                logger.exception("sink %s: worker error", self.name)

    def _drain(self) -> None:
        while True:
            if self.overflow is not None:
                if self._give_up or self._past_deadline():
                    return self._spill_queue()  # closing: the overflow keeps what is left
                if self._spill_due(None):
                    self._spill_queue()
                if len(self.overflow):
                    self._deliver(None)
                    continue
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                if self._past_deadline():  # shutdown drops or spills what is left
                    if self.overflow is not None:
                        continue
                    return
                item = self._queue.popleft()
                if not isinstance(item, Flush):
                    self._depth -= 1
            if isinstance(item, Flush):
                self._flush(item)
                continue
            snapshot, charge = item
            try:
                self._deliver(snapshot)
            finally:
                if charge is not None:
                    charge.done()

    def _past_deadline(self) -> bool:
        deadline = self._drain_deadline
        return deadline is not None and time.monotonic() > deadline

    def _flush(self, marker: Flush) -> None:
        try:
            marker.ok = bool(
                self._caller.call(lambda: self.sink.force_flush(marker.timeout_s), marker.timeout_s)
            )
        except Busy:
            pass  # an abandoned export is still running; the flush fails
        except BaseException as exc:
            reraise_at_exit(exc)
            logger.warning("sink %s: force_flush raised %s: %s", self.name, type(exc).__name__, exc)
        finally:
            marker.done.set()

    def _deliver(self, snapshot: Snapshot | None) -> None:
        """Export ``snapshot`` (None: the overflow's oldest entry), retrying FAILURE answers.

        A snapshot from the queue that cannot be delivered is spilled when there is an
        overflow, else counted failed; an overflow entry stays there until it is delivered.
        """
        delay, attempt = self.backoff_s, 0
        while True:
            start = time.monotonic()
            result, why, kind = self._attempt(snapshot)
            if result is ExportResult.SUCCESS:
                self._succeeded(time.monotonic() - start)
                return
            if result is None:  # the call never answered
                if snapshot is not None:
                    return self._give_up_on(snapshot, why, kind)
                self._failure(why, kind)  # the overflow keeps its entry: retried after a backoff
            if result is not None and result is not ExportResult.FAILURE:
                self._failure(f"returned {result}")  # permanent; an overflow dropped its entry
                return
            with self._cond:
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                since = self._failing_since
            if self.overflow is not None:
                if self._closed:  # the sink is failing at close: the overflow keeps it all
                    self._give_up = True
                    return self._spill_queue(snapshot)
                if snapshot is not None and time.monotonic() - since >= self.spill_after_s:
                    return self._spill_queue(snapshot)
            elif attempt >= self.max_retries:
                return self._give_up_on(snapshot, why, kind)
            waited = self._wait_backoff(delay, snapshot)
            if waited == _SPILLED:
                return
            if waited == _GIVE_UP:
                if self.overflow is not None:
                    self._give_up = True
                    return self._spill_queue(snapshot)
                return self._give_up_on(snapshot, why, kind)
            self._count(retried=1)
            delay, attempt = min(delay * 2, self.max_backoff_s), attempt + 1

    def _attempt(self, snapshot: Snapshot | None) -> tuple[ExportResult | None, str, str]:
        """One call into the sink: its answer, or None with why it did not answer."""
        timeout = self.timeout_s
        if snapshot is None:
            overflow = self.overflow
            assert overflow is not None

            def call() -> ExportResult:
                return overflow.replay(timeout)
        else:

            def call() -> ExportResult:
                return self.sink.export(snapshot, timeout)

        try:
            return self._caller.call(call, timeout), "", ""
        except Busy:
            return None, "still stalled in an earlier call", ""
        except Stalled:
            self._count(timed_out=1)
            return None, f"stalled past {timeout:.3g}s; call abandoned", ""
        except BaseException as exc:  # SystemExit too: a sink must not end the worker
            reraise_at_exit(exc)
            return None, f"raised {type(exc).__name__}: {exc}", type(exc).__name__

    def _succeeded(self, latency: float) -> None:
        with self._cond:
            self._exported += 1
            self._last_latency = latency
            streak, self._streak = self._streak, 0
            self._failing_since = None
        if streak:
            logger.info("sink %s: recovered after %d failures", self.name, streak)

    def _give_up_on(self, snapshot: Snapshot | None, why: str, kind: str) -> None:
        self._failure(why or "out of retries", kind)
        if snapshot is not None:
            self._discard(snapshot)

    def _failure(self, why: str, kind: str = "") -> None:
        """Count one failed snapshot; log the first of a run of failures, and each new kind."""
        with self._cond:
            self._failed += 1
            self._streak += 1
            new = self._streak == 1 or kind != self._failure_kind
            self._failure_kind = kind
        if new:
            logger.warning("sink %s: export failed: %s (further failures counted)", self.name, why)

    def _wait_backoff(self, delay: float, held: Snapshot | None) -> str:
        """Sleep ``delay`` (at least the sink's retry pushback) unless the drain deadline
        comes first; spill when it is due."""
        if self.jitter:
            delay *= random.uniform(0.5, 1.0)
        try:
            pushback = self.sink.retry_after()
        except Exception:  # a bug of ours: the queue's own backoff still holds
            logger.exception("sink %s: retry_after failed", self.name)
            pushback = None
        if pushback is not None:
            delay = max(delay, pushback)
        end = time.monotonic() + delay
        while True:
            if self.overflow is not None and self._spill_due(held):
                self._spill_queue(held)
                if held is not None:
                    return _SPILLED
            deadline = self._drain_deadline
            if deadline is not None and end > deadline:
                return _GIVE_UP
            now = time.monotonic()
            if now >= end:
                return _WAITED
            with self._cond:  # woken by submit (to spill) and by close
                self._cond.wait(end - now)

    def _spill_due(self, held: Snapshot | None) -> bool:
        """The queue is half full, or failures last and something waits in memory."""
        depth = self._depth
        if depth >= max(1, self.queue_size // 2):
            return True
        since = self._failing_since
        prolonged = since is not None and time.monotonic() - since >= self.spill_after_s
        return prolonged and (depth > 0 or held is not None)

    def _spill_queue(self, held: Snapshot | None = None) -> None:
        """Move ``held``, then every queued snapshot, in order, to the overflow.

        Flush requests stay queued: they are answered once the overflow is delivered.
        """
        overflow = self.overflow
        assert overflow is not None
        with self._spill_lock:
            with self._cond:
                items = list(self._queue)
                self._queue = deque(item for item in items if isinstance(item, Flush))
                self._depth = 0
            moved: list[tuple[Snapshot, Charge | None]] = [
                item for item in items if not isinstance(item, Flush)
            ]
            if held is not None:
                moved.insert(0, (held, None))
            for snapshot, charge in moved:
                try:
                    overflow.spill(snapshot)
                except Exception:  # a bug of ours: the snapshot is lost, never silently
                    logger.exception("sink %s: spilling failed", self.name)
                    self._discard(snapshot)
                finally:
                    if charge is not None:
                        charge.done()

    def _discard(self, snapshot: Snapshot) -> None:
        try:
            self.sink.discard(snapshot)
        except Exception:
            logger.exception("sink %s: discard failed", self.name)

    def _count(self, *, retried: int = 0, timed_out: int = 0) -> None:
        with self._cond:
            self._retried += retried
            self._timed_out += timed_out
