"""A write-ahead journal of one sink's accepted snapshots: kept on disk until the sink has them.

The collector appends every snapshot it queues for a sink here before it answers the
sender (:meth:`Journal.append`, then one :meth:`Journal.sync` per request), and the sink's
queue acknowledges (:meth:`Journal.ack`) what the sink holds for good. A new process finds
what was not acknowledged in :attr:`Journal.pending` and queues it again, in order, before
anything new: after a crash the sink sees every accepted snapshot at least once, and sinks
that are idempotent (TensorBoard, W&B skip steps they hold) see each once.

On disk: segment files ``<first seq>.seg`` of framed records (length, CRC-32, sequence
number, then the snapshot as JSON, :func:`telemetry.otlp.batch.batch_to_json`: the form
of the OTLP spool's metric entries, read and written without loading the OTLP encoder), written
with ``os.write`` (in the page cache when ``append`` returns: a killed process loses none)
and, with ``fsync=True``, fsynced once per :meth:`sync` (a crash of the machine loses none).
A file ``acked`` holds the last acknowledged sequence number; a segment goes once every
record in it is acknowledged. A torn record at a segment's end (a write cut by a kill) was
never acknowledged to a sender and is skipped. A whole record whose payload fails its CRC
(bytes changed on disk) is skipped too, never replayed as data, and the records after it
are read on when the next one frames and checks; each skipped record is counted in
:attr:`Journal.unreadable`.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path

from telemetry.model.snapshot import Snapshot
from telemetry.otlp.batch import Batch, batch_from_json, batch_to_json

__all__ = ["Checkpoints", "Journal", "encoded"]

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("<IIQ")  # payload bytes, CRC-32 of the payload, sequence number
SEGMENT_BYTES = 4 * 1024 * 1024
"""A segment takes records until it holds this many bytes; then a new one starts."""
_ACKED = "acked"


class Journal:
    """One sink's on-disk FIFO of accepted snapshots, bounded by bytes.

    Args:
        directory: where the segments live; created if missing.
        limit_bytes: :attr:`full` once the segments hold this many bytes.
        fsync: fsync the segment on every :meth:`sync` (else the page cache keeps it).

    Attributes:
        pending: ``(seq, snapshot)`` left unacknowledged by an earlier process, in order.

    Raises:
        OSError: the directory cannot be created or read.
    """

    def __init__(self, directory: str | Path, limit_bytes: int, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.limit_bytes = limit_bytes
        self.fsync = fsync
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._acked = _read_acked(self.directory / _ACKED)
        self._segments: list[tuple[int, Path, int]] = []  # first seq, path, bytes
        self.pending: list[tuple[int, Snapshot]] = []
        self._next = self._acked + 1
        self._fd: int | None = None
        self._written = 0  # bytes in the open segment
        self._dirty = False
        self._error: OSError | None = None
        self.unreadable = 0  # segments whose tail was torn or unreadable
        self._unacked: deque[tuple[int, int]] = deque()  # (seq, record bytes) not acked
        self._unacked_bytes = 0
        self._load()

    def _load(self) -> None:
        for path in sorted(self.directory.glob("*.seg")):
            if not path.stem.isdigit():
                continue
            first = int(path.stem)  # a new segment never reuses a name, torn ones included
            self._next = max(self._next, first + 1)
            data = path.read_bytes()
            records, last, corrupt = _records(data)
            self.unreadable += corrupt + (0 if last == len(data) else 1)
            for seq, payload in records:
                self._next = max(self._next, seq + 1)
                if seq > self._acked:
                    self._count_unacked(seq, _HEADER.size + len(payload))
                    try:
                        self.pending.append((seq, self._decode(payload)))
                    except (ValueError, KeyError, TypeError) as exc:
                        self.unreadable += 1
                        logger.warning("journal %s: record %d unreadable: %s", path, seq, exc)
            self._segments.append((first, path, len(data)))
        self._delete_acked(keep_last=False)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last record written (or skipped by a failed write)."""
        with self._lock:
            return self._next - 1

    @property
    def bytes(self) -> int:
        """Bytes the segments hold now."""
        with self._lock:
            return sum(size for _, _, size in self._segments)

    @property
    def full(self) -> bool:
        """True once the records not acknowledged hold ``limit_bytes``: no more is accepted
        until acks."""
        with self._lock:
            return self._unacked_bytes >= self.limit_bytes

    def _count_unacked(self, seq: int, size: int) -> None:
        self._unacked.append((seq, size))
        self._unacked_bytes += size

    def append(self, snapshot: Snapshot) -> int | None:
        """Write ``snapshot`` at the tail (durable once :meth:`sync` returns); its seq, or
        None when the write failed (the next :meth:`sync` raises the error)."""
        payload = self._encode(snapshot)
        with self._lock:
            seq = self._next
            record = _HEADER.pack(len(payload), zlib.crc32(payload), seq) + payload
            try:
                if self._fd is None or self._written >= SEGMENT_BYTES:
                    self._open_segment(seq)
                assert self._fd is not None
                os.write(self._fd, record)
            except OSError as exc:
                self._error = exc
                self._next = seq + 1  # the next segment gets a name of its own
                self._close_segment()  # a torn record ends its segment
                return None
            self._next = seq + 1
            self._count_unacked(seq, len(record))
            self._written += len(record)
            first, path, size = self._segments[-1]
            self._segments[-1] = (first, path, size + len(record))
            self._dirty = True
        return seq

    def _encode(self, snapshot: Snapshot) -> bytes:
        """A record's payload (a subclass may journal other records)."""
        return encoded(snapshot)

    def _decode(self, payload: bytes) -> Snapshot:
        """The record of a payload written by :meth:`_encode`."""
        return batch_from_json(payload.decode()).snapshot

    def _close_segment(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _open_segment(self, seq: int) -> None:
        self._close_segment()
        path = self.directory / f"{seq:016d}.seg"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._segments.append((seq, path, 0))
        self._written = 0
        if self.fsync:
            _fsync_dir(self.directory)

    def sync(self) -> None:
        """Make every append so far durable (fsync with ``fsync=True``); cheap when clean.

        Raises:
            OSError: the fsync failed.
        """
        with self._lock:
            error, self._error = self._error, None
            if error is not None:
                raise error
            if not self._dirty or self._fd is None:
                return
            if self.fsync:
                os.fsync(self._fd)
            self._dirty = False

    def ack(self, seq: int) -> None:
        """The sink holds every record up to ``seq``: segments wholly before it go."""
        with self._lock:
            if seq <= self._acked:
                return
            self._acked = seq
            while self._unacked and self._unacked[0][0] <= seq:
                self._unacked_bytes -= self._unacked.popleft()[1]
            tmp = self.directory / f"{_ACKED}.tmp"
            try:
                tmp.write_text(str(seq))
                os.replace(tmp, self.directory / _ACKED)
            except OSError as exc:  # the records are replayed once more: sinks skip them
                logger.warning("journal %s: cannot record ack %d: %s", self.directory, seq, exc)
            self._delete_acked(keep_last=self._fd is not None)

    def _delete_acked(self, keep_last: bool) -> None:
        """Remove every segment whose records are all acknowledged (not the open one)."""
        keep: list[tuple[int, Path, int]] = []
        last = len(self._segments) - 1
        for i, (first, path, size) in enumerate(self._segments):
            end = self._segments[i + 1][0] - 1 if i < last else self._next - 1
            if (keep_last and i == last) or end > self._acked:
                keep.append((first, path, size))
            else:
                path.unlink(missing_ok=True)
        self._segments = keep

    def close(self) -> None:
        """Close the open segment (sync first); safe to call twice."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            if self.fsync and self._dirty:
                os.fsync(fd)
            os.close(fd)
        with self._lock:
            self._delete_acked(keep_last=False)


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


def _records(data: bytes) -> tuple[list[tuple[int, bytes]], int, int]:
    """The records of ``data`` whose CRC holds, where the last record read ends, and how
    many whole records failed their CRC. A failed record is stepped over only when its end
    is the data's end or the start of a record that checks (its length field is then
    trusted); otherwise reading stops there, as at a torn tail."""
    out: list[tuple[int, bytes]] = []
    at = corrupt = 0
    while (record := _record_at(data, at)) is not None:
        seq, payload, good = record
        end = at + _HEADER.size + len(payload)
        if not good:
            following = _record_at(data, end)
            if end != len(data) and (following is None or not following[2]):
                break
            corrupt += 1
        else:
            out.append((seq, payload))
        at = end
    return out, at, corrupt


def _record_at(data: bytes, at: int) -> tuple[int, bytes, bool] | None:
    """The record framed at ``at`` (sequence number, payload, whether its CRC holds); None
    when ``data`` ends inside it."""
    if at + _HEADER.size > len(data):
        return None
    size, crc, seq = _HEADER.unpack_from(data, at)
    payload = data[at + _HEADER.size : at + _HEADER.size + size]
    if len(payload) < size:
        return None
    return seq, payload, zlib.crc32(payload) == crc


def _read_acked(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return -1


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
