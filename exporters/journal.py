"""A write-ahead journal of one sink's accepted snapshots: kept on disk until the sink has them.

The collector appends every snapshot it queues for a sink here before it answers the
sender (:meth:`Journal.append`, then one :meth:`Journal.sync` per request), and the sink's
queue acknowledges (:meth:`Journal.ack`) what the sink holds for good. A new process finds
what was not acknowledged in :attr:`Journal.pending` and queues it again, in order, before
anything new: after a crash the sink sees every accepted snapshot at least once, and sinks
that are idempotent (TensorBoard, W&B skip steps they hold) see each once.

On disk a journal is a :class:`~exporters.record_log.RecordLog` (segment files of framed,
CRC-checked records and an ``acked`` file; torn tails and records failing their CRC are
skipped and counted in :attr:`Journal.unreadable`) whose payloads are snapshots as JSON,
:func:`telemetry.otlp.batch.batch_to_json`: the form of the OTLP spool's metric entries,
read and written without loading the OTLP encoder. With ``fsync=True`` each :meth:`sync`
fsyncs (a crash of the machine loses none); without, the page cache keeps what was
appended (a killed process loses none).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporters.record_log import RecordLog
from telemetry.model.snapshot import Snapshot
from telemetry.otlp.batch import Batch, batch_from_json, batch_to_json

__all__ = ["Checkpoints", "Journal", "encoded"]

logger = logging.getLogger(__name__)


class Journal:
    """One sink's on-disk FIFO of accepted snapshots, bounded by bytes.

    Args:
        directory: where the segments live; created if missing.
        limit_bytes: :attr:`full` once the records not acknowledged hold this many bytes.
        fsync: fsync the segment on every :meth:`sync` (else the page cache keeps it).
        encode: a record's payload; default: a snapshot as the spool's JSON (:func:`encoded`).
        decode: the record of a payload ``encode`` wrote (``bytes`` with ``encode=bytes``
            keeps raw records, as the collector's request journals do).

    Attributes:
        pending: ``(seq, record)`` left unacknowledged by an earlier process, in order.

    Raises:
        OSError: the directory cannot be created or read.
    """

    def __init__(
        self,
        directory: str | Path,
        limit_bytes: int,
        fsync: bool = True,
        *,
        encode: Callable[[Any], bytes] | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> None:
        self._encode = encode or encoded
        self._decode = decode or _snapshot_of
        self.log = RecordLog(directory, limit_bytes, fsync)
        self.directory = self.log.directory
        self.limit_bytes = limit_bytes
        self._undecodable = 0
        self._error_lock = threading.Lock()
        self._error: OSError | None = None  # of a failed append, raised by the next sync
        self.pending: list[tuple[int, Any]] = []
        for record, payload in self.log.held():
            try:
                self.pending.append((record.seq, self._decode(payload)))
            except (ValueError, KeyError, TypeError) as exc:
                self._undecodable += 1
                logger.warning(
                    "journal %s: record %d unreadable: %s", record.segment, record.seq, exc
                )

    @property
    def unreadable(self) -> int:
        """Records skipped when the journal was opened: torn, failing their CRC, or not
        decoding."""
        return self.log.unreadable + self._undecodable

    @property
    def last_seq(self) -> int:
        """The sequence number of the last record written (or skipped by a failed write)."""
        return self.log.last_seq

    @property
    def bytes(self) -> int:
        """Bytes the segments hold now."""
        return self.log.bytes

    @property
    def full(self) -> bool:
        """True once the records not acknowledged hold ``limit_bytes``: no more is accepted
        until acks."""
        return self.log.full

    def append(self, record: Any) -> int | None:
        """Write ``record`` (a snapshot, by default) at the tail (durable once :meth:`sync`
        returns); its seq, or None when the write failed (the next :meth:`sync` raises the
        error)."""
        try:
            return self.log.append(self._encode(record)).seq
        except OSError as exc:
            with self._error_lock:
                self._error = exc
            return None

    def sync(self) -> None:
        """Make every append so far durable (fsync with ``fsync=True``); cheap when clean.

        Raises:
            OSError: an append since the last sync failed, or the fsync failed.
        """
        with self._error_lock:
            error, self._error = self._error, None
        if error is not None:
            raise error
        self.log.sync()

    def ack(self, seq: int) -> None:
        """The sink holds every record up to ``seq``: segments wholly before it go."""
        self.log.ack(seq)

    def close(self) -> None:
        """Close the open segment (sync first); safe to call twice."""
        self.log.close()


def _snapshot_of(payload: bytes) -> Snapshot:
    """The snapshot of a payload :func:`encoded` wrote."""
    return batch_from_json(payload.decode()).snapshot


_last: tuple[Snapshot, bytes] | None = None


def encoded(snapshot: Snapshot) -> bytes:
    """``snapshot`` as a record's payload, the spool's JSON format; encoded once for the
    several journals a fan-out hands the same snapshot to in turn (and for a digest of what
    was just appended)."""
    global _last
    last = _last
    if last is not None and last[0] is snapshot:
        return last[1]
    payload = batch_to_json(Batch(snapshot)).encode()
    _last = (snapshot, payload)
    return payload


class Checkpoints:
    """Acknowledges a journal as its sink comes to hold what it was given.

    The sink's queue reports each journaled snapshot it is done with (:meth:`done`: exported,
    or given up and counted). Every ``every`` snapshots, or when the queue runs empty at
    least ``interval_s`` after the last flush, the sink is flushed; once the flush succeeded
    and ``settle_s`` passed (the time a sink's own writer may still hold data: W&B's
    transaction-log flush), the journal is acknowledged up to the last snapshot before that
    flush. What is exported but not acknowledged yet when the process dies is replayed, and
    skipped by sinks that hold it.

    Args:
        journal: the sink's journal.
        flush: flushes the sink; True when it holds everything given so far.
        settle_s: seconds after a successful flush before the data counts as held.
        every: snapshots between two flushes while the queue is busy.
        interval_s: the least time between two flushes when the queue runs empty.
    """

    def __init__(
        self,
        journal: Journal,
        flush: Callable[[], bool],
        settle_s: float = 0.0,
        every: int = 64,
        interval_s: float = 0.25,
    ) -> None:
        self.journal = journal
        self._flush = flush
        self._settle_s = settle_s
        self._every = every
        self._interval_s = interval_s
        self._flushed_at = 0.0
        self._last: int | None = None
        self._since = 0
        self._settling: deque[tuple[float, int]] = deque()  # (held from, seq)

    def done(self, seq: int, idle: bool) -> None:
        """The queue is done with record ``seq``; ``idle``: nothing else is queued."""
        self._last = seq
        self._since += 1
        due = idle and time.monotonic() - self._flushed_at >= self._interval_s
        if due or self._since >= self._every:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Flush the sink if it was given something since the last flush; ack what settled."""
        now = self._flushed_at = time.monotonic()
        if self._last is not None and self._since and self._flush():
            self._settling.append((now + self._settle_s, self._last))
            self._since = 0
        while self._settling and self._settling[0][0] <= now:
            self.journal.ack(self._settling.popleft()[1])

    def final(self) -> None:
        """The sink was shut down cleanly (its files complete): ack everything done."""
        if self._last is not None:
            self.journal.ack(self._last)
