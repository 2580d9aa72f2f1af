"""The worker of one queued sink: drain its backlog into the sink, retry, spill, replay.

One named daemon thread per :class:`~exporters.queued.QueuedSink` runs :meth:`QueueWorker.run`: it
takes snapshots in order and exports each under the call timeout, retrying FAILURE answers
with exponential backoff. With an overflow the order is kept this way: everything in the
overflow is older than everything queued, so the worker replays the overflow's oldest entry
before it takes from the queue, and a spill moves the snapshot in hand first, then the
queue, to the overflow's tail. While the overflow holds entries and failures last, the caller
spills what it submits itself (:meth:`QueueWorker.spill_submitted`), behind what is still queued.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from exporters.base import Delivery, ExportResult, Sink
from exporters.bounded_queue import BoundedQueue, Flush, Queued
from exporters.retry import retry
from exporters.tally import SinkStats
from exporters.timed_call import Stalled, TimedCaller, reraise_at_exit

if TYPE_CHECKING:
    from exporters.journal import Checkpoints
    from telemetry.model.snapshot import Snapshot

__all__ = ["QueueWorker"]

logger = logging.getLogger("exporters.queued")

_WAITED, _GIVE_UP, _SPILLED = "waited", "give up", "spilled"


class _Answer(NamedTuple):
    """One call into the sink: its answer (None: it did not answer, ``why``; ``kind``:
    what it raised) and how long it took."""

    result: ExportResult | None
    why: str = ""
    kind: str = ""
    latency_s: float = 0.0


class QueueWorker:
    """Drains one sink's backlog; its state is what it is given, plus :attr:`give_up`.

    Args:
        sink: the sink to export to (one call at a time, through ``caller``), with its
            overflow, retry pushback and discards.
        policy: timeout, retries, backoff, jitter and spill delay.
        backlog: the queue to take snapshots and flush requests from.
        tally: where outcomes are counted.
        caller: runs each call into the sink under its timeout.
        name: the sink's name in logs.

    Attributes:
        give_up: the sink was still failing at the drain deadline, or the queue's shutdown
            ends the sink (:meth:`stop`): the overflow keeps the rest.
        acks: with a journal, told of every journaled snapshot the worker is done with.
    """

    def __init__(
        self,
        sink: Sink,
        policy: Delivery,
        backlog: BoundedQueue,
        tally: SinkStats,
        caller: TimedCaller,
        name: str,
    ) -> None:
        self.sink = sink
        self.overflow = sink.overflow
        self.policy = policy
        self.backlog = backlog
        self.tally = tally
        self.caller = caller
        self.name = name
        self.give_up = False
        self.acks: Checkpoints | None = None
        self.flush_failures = 0  # force_flush calls that raised in a row

    def run(self) -> None:
        """Drain until the backlog is closed and empty or past its deadline; never raises:
        an error of ours is logged and the loop goes on with the next item."""
        backlog = self.backlog
        while True:
            try:
                if self.overflow is not None:
                    if self.give_up or backlog.past_deadline():
                        return self.spill_queue()  # closing: the overflow keeps what is left
                    if self._spill_due(None):
                        self.spill_queue()
                    if self._spooled():
                        self._deliver(None)
                        continue
                item = backlog.take()
                if item is None:  # closed and empty, or past the deadline
                    if self.overflow is not None and backlog.past_deadline():
                        self.spill_queue()
                    return
                if isinstance(item, Flush):
                    self._flush(item)
                    continue
                snapshot, charge, seq = item
                try:
                    self._deliver(snapshot)
                finally:
                    if charge is not None:
                        charge.done()
                if seq is not None and self.acks is not None:
                    self.acks.done(seq, self.backlog.depth == 0)
            except BaseException as exc:  # a bug of ours: log it, keep draining
                reraise_at_exit(exc)
                logger.exception("sink %s: worker error", self.name)

    def _flush(self, marker: Flush) -> None:
        try:
            marker.ok = self.flush_sink(marker.timeout_s)
        finally:
            marker.done.set()

    def flush_sink(self, timeout_s: float) -> bool:
        """The sink's ``force_flush`` under the call timeout; False when it failed (logged
        at the first of a run of failures and when they end, with their count)."""
        try:
            ok = bool(self.caller.call(lambda: self.sink.force_flush(timeout_s), timeout_s))
        except BaseException as exc:
            if isinstance(exc, Stalled) and exc.earlier:
                return False  # an abandoned export is still running; the flush fails
            reraise_at_exit(exc)
            self.flush_failures += 1
            if self.flush_failures == 1:
                why = f"{type(exc).__name__}: {exc}"
                logger.warning("sink %s: force_flush raised %s (repeats counted)", self.name, why)
            return False
        if ok and self.flush_failures:
            logger.info("sink %s: flushed again after %d failures", self.name, self.flush_failures)
            self.flush_failures = 0
        return ok

    def _deliver(self, snapshot: Snapshot | None) -> None:
        """Export ``snapshot`` (None: the overflow's oldest entry), retrying FAILURE answers.

        A snapshot from the queue that cannot be delivered is spilled when there is an
        overflow, else counted failed; an overflow entry stays there until it is delivered.
        A call that never answered is not retried for a snapshot from the queue.
        """
        policy = self.policy
        answer = retry(
            partial(self._attempt, snapshot),
            lambda answer: (
                answer.result is ExportResult.FAILURE
                or (answer.result is None and snapshot is None)
            ),
            lambda answer, wait_s: self._pause(answer, wait_s, snapshot),
            backoff_s=policy.backoff_s,
            max_backoff_s=policy.max_backoff_s,
            jitter=policy.jitter,
            # With an overflow, tries go on until the drain deadline (the endpoint may come
            # back) or the queue's shutdown; then the pause spills what is held.
            max_retries=None if self.overflow is not None else policy.max_retries,
            pushback=lambda answer: self._pushback(),
        )
        result = answer.result
        if result is ExportResult.SUCCESS:
            streak = self.tally.add_success(answer.latency_s)
            if streak:
                logger.info("sink %s: recovered after %d failures", self.name, streak)
        elif result is not None and result is not ExportResult.FAILURE:
            self._failure(f"returned {result}")  # permanent; an overflow dropped its entry
        elif self.overflow is None or (result is None and snapshot is not None):
            self._give_up_on(snapshot, answer.why, answer.kind)
        # else: the pause spilled ``snapshot`` and the queue to the overflow

    def _pause(self, answer: _Answer, wait_s: float, held: Snapshot | None) -> bool:
        """Between two tries: count, then wait ``wait_s`` for the next, or spill ``held`` and
        the queue to the overflow (True: try again)."""
        if answer.result is None:  # an overflow entry's call never answered
            self._failure(answer.why, answer.kind)  # the overflow keeps the entry
        self.tally.failing()  # a run of failures starts now if none runs
        # An endpoint that asked for a delay (retry pushback) is up but busy: what is in
        # hand waits in memory for it; only a full queue spills then.
        busy = self._pushback() is not None
        waited = self._wait_backoff(wait_s, held, busy)
        if waited == _SPILLED:
            return False
        if waited == _GIVE_UP:
            if self.overflow is not None:
                self.give_up = True
                self.spill_queue(held)
            return False
        self.tally.add(retried=1)
        return True

    def _attempt(self, snapshot: Snapshot | None) -> _Answer:
        """One call into the sink: its answer, or None with why it did not answer."""
        timeout = self.policy.timeout_s
        if snapshot is None:
            assert self.overflow is not None
            call = partial(self.overflow.replay, timeout)
        else:
            call = partial(self.sink.export, snapshot, timeout)
        start = time.monotonic()
        try:
            result = self.caller.call(call, timeout)
        except Stalled as stall:
            if stall.earlier:
                return _Answer(None, "still stalled in an earlier call")
            self.tally.add(timed_out=1)
            return _Answer(None, f"stalled past {timeout:.3g}s; call abandoned")
        except BaseException as exc:  # SystemExit too: a sink must not end the worker
            reraise_at_exit(exc)
            return _Answer(None, f"raised {type(exc).__name__}: {exc}", type(exc).__name__)
        return _Answer(result, latency_s=time.monotonic() - start)

    def _give_up_on(self, snapshot: Snapshot | None, why: str, kind: str) -> None:
        self._failure(why or "out of retries", kind)
        if snapshot is not None:
            self.discard(snapshot)

    def _failure(self, why: str, kind: str = "") -> None:
        """Count one failed snapshot; log the first of a run of failures, and each new kind."""
        if self.tally.add_failure(kind):
            logger.warning("sink %s: export failed: %s (further failures counted)", self.name, why)

    def stop(self) -> None:
        """The queue's shutdown is about to end the sink: call it no more, spill or drop."""
        with self.backlog.cond:
            self.give_up = True
            self.backlog.cond.notify_all()

    def _wait_backoff(self, wait_s: float, held: Snapshot | None, busy: bool) -> str:
        """Sleep ``wait_s`` unless the drain deadline comes first or :meth:`stop` is
        called; spill when it is due."""
        end = time.monotonic() + wait_s
        while True:
            if self.overflow is not None and self._spill_due(held, busy):
                self.spill_queue(held)
                if held is not None:
                    return _SPILLED
            deadline = self.backlog.deadline
            if self.give_up or (deadline is not None and end > deadline):
                return _GIVE_UP
            now = time.monotonic()
            if now >= end:
                return _WAITED
            self.backlog.wait(end - now)  # woken by submit (to spill) and by close

    def _pushback(self) -> float | None:
        try:
            return self.sink.retry_after()
        except Exception:  # a bug of ours: the queue's own backoff still holds
            logger.exception("sink %s: retry_after failed", self.name)
            return None

    def _spill_due(self, held: Snapshot | None, busy: bool = False) -> bool:
        """The queue is half full, or failures last (the endpoint not ``busy``: no retry
        pushback) and something waits in memory."""
        depth = self.backlog.depth
        if depth >= max(1, self.policy.queue_size // 2):
            return True
        since = self.tally.failing_since
        prolonged = since is not None and time.monotonic() - since >= self.policy.spill_after_s
        return prolonged and not busy and (depth > 0 or held is not None)

    def _spooled(self) -> bool:
        """The overflow holds entries; read under the spill lock, so that an entry a caller
        is writing (:meth:`spill_submitted`) is seen before the worker takes from the queue."""
        assert self.overflow is not None
        with self.backlog.spill_lock:
            return len(self.overflow) > 0

    def spill_submitted(self, snapshot: Snapshot) -> bool:
        """On the caller's thread, while the overflow holds entries and the worker would spill
        ``snapshot`` at its next wake (failures last, no retry pushback): move every queued
        snapshot, then ``snapshot``, to the overflow; True when it was (kept or counted there).

        Under the spill lock the order holds: the worker takes from the queue only once it
        found the overflow empty under the same lock, and holds no snapshot while the
        overflow has entries, so nothing submitted earlier is still on its way there.
        """
        overflow = self.overflow
        if overflow is None or self.tally.failing_since is None:
            return False  # no outage: the queue as always, without a lock
        with self.backlog.spill_lock:
            busy = self._pushback() is not None
            if self.backlog.closed or not len(overflow) or not self._spill_due(snapshot, busy):
                return False
            self._spill_in_order([*self.backlog.take_snapshots(), (snapshot, None, None)])
        return True

    def spill_queue(self, held: Snapshot | None = None) -> None:
        """Move ``held``, then every queued snapshot, in order, to the overflow.

        Flush requests stay queued: they are answered once the overflow is delivered.
        """
        assert self.overflow is not None
        with self.backlog.spill_lock:
            moved = self.backlog.take_snapshots()
            if held is not None:
                moved.insert(0, (held, None, None))
            self._spill_in_order(moved)

    def _spill_in_order(self, moved: list[Queued]) -> None:
        """Spill ``moved`` in order (the caller holds the spill lock); release their charges."""
        overflow = self.overflow
        assert overflow is not None
        for snapshot, charge, _ in moved:
            try:
                overflow.spill(snapshot)
            except Exception:  # a bug of ours: the snapshot is lost, never silently
                logger.exception("sink %s: spilling failed", self.name)
                self.discard(snapshot)
            finally:
                if charge is not None:
                    charge.done()

    def discard(self, snapshot: Snapshot) -> None:
        """Tell the sink (if it counts them) that ``snapshot`` was given up unexported."""
        try:
            self.sink.discard(snapshot)
        except Exception:
            logger.exception("sink %s: discard failed", self.name)
