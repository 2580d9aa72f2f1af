"""Queue, retry, timeout and overflow written once around every sink.

:class:`QueuedSink` gives one sink its own bounded queue and a named daemon worker:
``submit`` never blocks (a full queue drops the snapshot and counts it), each export runs
under a timeout on a separate call thread (:mod:`exporters.timed_call`), so a sink that stalls
is counted as failed and abandoned (marked degraded) while the worker keeps draining its
queue. Only ``ExportResult.FAILURE`` is retried, with exponential backoff. A sink with an
:class:`~exporters.base.Overflow` (OTLP's spool) never loses what it cannot deliver now:
when its queue fills past half or failures last, queued snapshots move there and are
replayed, in order, before anything queued later; during an outage ``submit`` itself puts
each snapshot there (a file written on the caller's thread, never the network). Whatever
a sink raises, ``BaseException`` included, is caught, logged and counted; only the
interpreter's own shutdown ends a worker. A copy in a forked child is disabled: it neither
exports the parent's queue nor blocks on the parent's locks.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Generic

from exporters.base import Delivery, Item, Sink
from exporters.bounded_queue import BoundedQueue, Flush
from exporters.journal import Checkpoints, Journal
from exporters.memory_charge import MemoryCharge
from exporters.queue_worker import QueueWorker
from exporters.tally import SinkStats
from exporters.timed_call import TimedCaller, reraise_at_exit

__all__ = ["QueuedSink", "SinkStats"]

logger = logging.getLogger(__name__)

CANCEL_GRACE_S = 0.5
"""The end of shutdown's deadline (at most this, and at most a quarter of it) that it keeps
for a worker whose call the sink's own shutdown ends, to spill or count what it holds."""


class QueuedSink(Generic[Item]):
    """One sink behind a bounded queue, a worker thread, a per-export timeout and retries.

    Generic over the sink's item: Snapshots (every sink of the registry; a journal and a
    memory charge need them), or the trace forwarder's serialized requests.

    The queue (:class:`~exporters.bounded_queue.BoundedQueue`), the counters
    (:class:`~exporters.tally.SinkStats`) and the worker
    (:class:`~exporters.queue_worker.QueueWorker`) are objects of their own, made anew in a
    forked child.

    Args:
        sink: the sink to drive; ``export`` is only ever called from one thread at a time.
        queue_size: snapshots waiting at most; more are dropped and counted.
        timeout_s: seconds one export may take before it is abandoned and counted failed.
        max_retries: retries of an export that returned ``ExportResult.FAILURE`` (a sink
            with an overflow retries until failures last ``spill_after_s``, then spills).
        backoff_s: first retry delay; doubles per retry up to ``max_backoff_s``.
        max_backoff_s: the longest delay between two retries.
        jitter: draw each delay from [delay / 2, delay].
        spill_after_s: with an overflow, how long failures last before the queue moves there.
        name: label for stats and thread names; defaults to ``sink.name``.

    Attributes:
        policy: the queue's :class:`~exporters.base.Delivery` policy, from the arguments.
        overflow: the sink's :attr:`~exporters.base.Sink.overflow` (None: none).
    """

    def __init__(
        self,
        sink: Sink[Item],
        queue_size: int = 1024,
        timeout_s: float = 10.0,
        *,
        max_retries: int = 3,
        backoff_s: float = 0.05,
        max_backoff_s: float = 1.0,
        jitter: bool = False,
        spill_after_s: float = 2.0,
        name: str | None = None,
    ) -> None:
        self.sink = sink
        self.name = name or sink.name
        self.policy = Delivery(
            queue_size, timeout_s, max_retries, backoff_s, max_backoff_s, jitter, spill_after_s
        )
        self.overflow = sink.overflow
        self.journal: Journal | None = None
        self._start()
        self._forked = False
        sink.attach(self.depth)
        if self.overflow is not None and len(self.overflow):
            self._ensure_worker()  # an earlier process's entries go now, not at a first submit

    @classmethod
    def of(
        cls,
        sink: Sink[Item],
        queue_size: int = 1024,
        timeout_s: float = 10.0,
        name: str | None = None,
    ) -> QueuedSink[Item]:
        """``sink`` behind a queue with the sink's own :class:`~exporters.base.Delivery`
        policy when it declares one, else with ``queue_size`` and ``timeout_s``."""
        policy = sink.delivery or Delivery(queue_size, timeout_s)
        return cls(sink, **dataclasses.asdict(policy), name=name)

    @property
    def queue_size(self) -> int:
        """Snapshots waiting at most."""
        return self.policy.queue_size

    def _start(self) -> None:
        """Fresh queue, counters, caller and worker (at construction, and in a forked child)."""
        self._pid = os.getpid()
        self._backlog = BoundedQueue(self.policy.queue_size)
        self._tally = SinkStats(self.name)
        self._caller = TimedCaller(f"rltel-sink-{self.name}")
        self._worker = QueueWorker(
            self.sink, self.policy, self._backlog, self._tally, self._caller, self.name
        )
        self._thread: threading.Thread | None = None
        self._shutdown_done = self._sink_shut = False

    def journal_to(self, journal: Journal) -> None:
        """Write every snapshot taken from now on to ``journal`` first (the collector's
        durable queue), and queue what an earlier process left there unacknowledged.

        The journal is acknowledged as the sink holds what it exported: after its
        ``force_flush`` and the sink's :attr:`~exporters.base.Sink.settle_s`. The sink keeps
        what it holds undelivered at a clean shutdown in the journal's directory itself
        (:meth:`~exporters.base.Sink.keep_in`: the remote-write backlog).
        """
        self.journal = journal
        self.sink.keep_in(journal.directory)
        self._worker.acks = Checkpoints(
            journal, lambda: self._worker.flush_sink(self.policy.timeout_s), self.sink.settle_s
        )
        pending, journal.pending = journal.pending, []
        if pending:
            self._backlog.restore((snapshot, None, seq) for seq, snapshot in pending)
            self._ensure_worker()

    # -- caller side -------------------------------------------------------------------

    def submit(
        self, snapshot: Item, charge: MemoryCharge | None = None, reserved: bool = False
    ) -> bool:
        """Queue ``snapshot`` without blocking; False (and counted) when full or closed.

        While the sink's overflow holds entries and failures last (an outage), ``snapshot``
        goes there on this thread, behind what is still queued, before this returns: a
        process killed then loses nothing it submitted (a file write, never the network).

        Args:
            snapshot: the snapshot to export.
            charge: held while the snapshot is queued or exported.
            reserved: fill a slot taken by :meth:`reserve` (never refused for space).
        """
        if self._in_fork():
            return False  # the sink belongs to the parent: not even its counters
        if self._worker.spill_submitted(snapshot):  # an outage: on disk before this returns
            if reserved:
                self._backlog.release(1)
            return True
        write = self.journal.append if self.journal is not None else None
        if self._backlog.offer(snapshot, charge, reserved, write):
            self._ensure_worker()
            return True
        self._tally.add(dropped=1)
        self._worker.discard(snapshot)
        return False

    def reserve(self, n: int) -> int | None:
        """Take ``n`` queue slots for an admitted request; None when they are not free.

        An empty queue always takes one request, however large. A degraded sink takes
        everything and reserves nothing (0): what its queue cannot hold is dropped and
        counted, so a failing sink never makes the collector refuse. A healthy sink whose
        journal is full takes nothing (None).
        """
        if self._in_fork():
            return None
        degraded = self._degraded()
        if self.journal is not None and not degraded and self.journal.full:
            return None
        return self._backlog.reserve(n, degraded)

    def release(self, n: int) -> None:
        """Give back reserved slots that were not filled."""
        self._backlog.release(n)

    def depth(self) -> int:
        """Snapshots queued now."""
        return self._backlog.depth

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued before this call was exported, then flush the sink.

        With an overflow, what was spilled is replayed first: True means delivered.

        Returns:
            True when the queue drained and the sink's ``force_flush`` returned True in time.
        """
        marker = self.request_flush(timeout_s)
        return marker is not None and marker.done.wait(timeout_s) and marker.ok

    def request_flush(self, timeout_s: float) -> Flush | None:
        """Queue a flush behind everything queued now; None when closed."""
        marker = Flush(timeout_s)
        if self._in_fork() or not self._backlog.add_flush(marker):
            return None
        self._ensure_worker()
        return marker

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop accepting snapshots; the worker drains until ``timeout_s`` from now."""
        if not self._in_fork():
            self._backlog.close(timeout_s)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Drain the queue with a deadline, then shut the sink down; safe to call twice.

        Snapshots still queued at the deadline are dropped and counted, or go to the
        overflow. A worker still inside a call near the deadline is ended by the sink's own
        shutdown (OTLP closes its channel), and then spills or counts what it holds, so the
        counters are final when this returns (unless the worker gets no CPU in that time).
        """
        if self._forked or self._pid != os.getpid():
            return
        deadline = time.monotonic() + timeout_s
        self.close(timeout_s)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - min(CANCEL_GRACE_S, timeout_s / 4) - time.monotonic()))
            if thread.is_alive() and not self._caller.stalled:
                # End the call in flight, so that the worker spills or counts what it holds
                # before this returns (an abandoned call would make the sink's shutdown fail).
                self._worker.stop()
                self._shutdown_sink(deadline)
                thread.join(max(0.0, deadline - time.monotonic()))
        with self._backlog.cond:
            if self._shutdown_done:
                return
            self._shutdown_done = True
        if self.overflow is not None:
            self._worker.spill_queue()
        self._drop_queue()
        if self._caller.stalled:
            # A slow export abandoned earlier may still finish within the deadline; the
            # sink must still be shut down then (a W&B/SwanLab run left open is incomplete).
            self._caller.join_stalled(deadline - time.monotonic())
        self._shutdown_sink(deadline)

    def stats(self) -> SinkStats:
        """A consistent copy of this sink's counters."""
        self._in_fork()
        return self._tally.copy(self._backlog.depth, self._degraded())

    def _degraded(self) -> bool:
        failing = self.overflow is not None and self._tally.failing_since is not None
        return self._tally.streak > 0 or failing or self._caller.stalled

    def _in_fork(self) -> bool:
        """True in a forked child, where the parent's threads and queue do not exist."""
        if self._pid != os.getpid():
            self._start()
            self._forked = True
        return self._forked

    def _ensure_worker(self) -> None:
        with self._backlog.cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._worker.run, name=f"rltel-sink-{self.name}", daemon=True
                )
                self._thread.start()

    def _drop_queue(self) -> None:
        """Count what is still queued as dropped; answer pending flushes."""
        left = self._backlog.take_all()
        snapshots = [item for item in left if not isinstance(item, Flush)]
        self._tally.add(dropped=len(snapshots))
        for item in left:
            if isinstance(item, Flush):
                item.done.set()
        for snapshot, charge, _ in snapshots:
            if charge is not None:
                charge.done()
            self._worker.discard(snapshot)

    def _shutdown_sink(self, deadline: float) -> None:
        """Call the sink's shutdown once, within what is left of ``deadline``."""
        with self._backlog.cond:
            if self._sink_shut:
                return
            self._sink_shut = True
        remaining = max(0.05, deadline - time.monotonic())
        try:
            self._caller.call(lambda: self.sink.shutdown(remaining), remaining)
        except BaseException as exc:  # a sink's shutdown failing must not reach the caller
            reraise_at_exit(exc)
            logger.warning("sink %s: shutdown raised %s: %s", self.name, type(exc).__name__, exc)
        else:
            if self._worker.acks is not None:
                self._worker.acks.final()
        if self.journal is not None:
            self.journal.close()
