"""rltel's one on-disk log: records appended at the tail, acknowledged from the head.

The collector's write-ahead journals (:mod:`exporters.journal`) and the OTLP sink's spool
(:mod:`exporters.otlp.spool`) both keep their queue here; a record's payload is bytes the
user chooses. On disk: segment files ``<first seq>.seg`` of framed records (payload length,
CRC-32 of the payload, sequence number: :data:`HEADER`; then the payload), and a file
``acked`` with the last acknowledged sequence number, written over in place (one
fixed-width ``pwrite``: :meth:`RecordLog.ack`). Every record is
one ``os.write`` to a segment opened ``O_APPEND``: in the page cache when :meth:`append`
returns, so a killed process loses none, and with ``fsync=True`` on disk once :meth:`sync`
returns. A write that fails is cut off again (the segment truncated to its last whole
record); a segment is never appended to by a later process, so a record torn by a kill is
only ever at a segment's end.

Reading (a new process): a torn record at a segment's end is skipped; a whole record whose
payload fails its CRC (bytes changed on disk) is skipped too, never returned as data, and
the records after it are read on when the next one frames and checks. Each skipped record
counts in :attr:`RecordLog.unreadable`. Records up to the acknowledged one are not returned
again; a segment goes once every record in it is acknowledged (the open one once it is
closed), so acknowledged records hold disk for at most one segment.

Bounded by bytes: the records not acknowledged count against ``limit_bytes``
(:attr:`RecordLog.full`, :meth:`RecordLog.fits`); the log refuses nothing itself.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HEADER", "SEGMENT_BYTES", "Record", "RecordLog"]

logger = logging.getLogger(__name__)

HEADER = struct.Struct("<IIQ")
"""A record's header: payload bytes, CRC-32 of the payload, sequence number."""
SEGMENT_BYTES = 4 * 1024 * 1024
"""A segment takes records until it holds this many bytes; then a new one starts."""
_ACKED = "acked"
_ACK_WIDTH = 20  # digits of the acked sequence number on disk, space-padded (int64 fits)


@dataclass(frozen=True, slots=True)
class Record:
    """Where one record not acknowledged yet lies.

    Attributes:
        seq: its sequence number.
        segment: the segment file holding it.
        offset: where its payload starts in the segment.
        size: its payload's bytes.
        crc: the CRC-32 of its payload.
    """

    seq: int
    segment: Path
    offset: int
    size: int
    crc: int

    @property
    def bytes(self) -> int:
        """The record's bytes on disk, header included."""
        return HEADER.size + self.size


class RecordLog:
    """A FIFO of byte records in segment files, acknowledged from the head, bounded by bytes.

    One process holds a directory at a time. Opening it reads every segment (see the module
    docstring for what is skipped) and deletes the segments whose records are all
    acknowledged.

    Args:
        directory: where the segments live; created if missing.
        limit_bytes: :attr:`full` once the records not acknowledged hold this many bytes.
        fsync: fsync the open segment on every :meth:`sync` (else the page cache keeps it).
        segment_bytes: a segment takes records until it holds this many bytes
            (default :data:`SEGMENT_BYTES`).

    Attributes:
        unreadable: records skipped when the segments were read: torn tails and records
            failing their CRC.

    Raises:
        OSError: the directory cannot be created or read.
    """

    def __init__(
        self,
        directory: str | Path,
        limit_bytes: int,
        fsync: bool = True,
        segment_bytes: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.limit_bytes = limit_bytes
        self.fsync = fsync
        self.segment_bytes = SEGMENT_BYTES if segment_bytes is None else segment_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._acked = _read_acked(self.directory / _ACKED)
        self._next = self._acked + 1
        self._segments: list[tuple[int, Path, int]] = []  # first seq, path, bytes
        self._held: deque[Record] = deque()  # not acknowledged, oldest first
        self._held_bytes = 0
        self._fd: int | None = None
        self._written = 0  # bytes in the open segment
        self._dirty = False
        self._ack_failing = False  # the last ack could not be recorded (logged once)
        self._ack_fd: int | None = None  # ``acked``, kept open while acks are written
        self.unreadable = 0
        self._load()

    def _load(self) -> None:
        for path in sorted(self.directory.glob("*.seg")):
            if not path.stem.isdigit():
                continue
            first = int(path.stem)  # a new segment never reuses a name, torn ones included
            self._next = max(self._next, first + 1)
            data = path.read_bytes()
            records, end, corrupt = _scan(data, path)
            self.unreadable += corrupt + (end != len(data))
            for record in records:
                self._next = max(self._next, record.seq + 1)
                if record.seq > self._acked:
                    self._hold(record)
            self._segments.append((first, path, len(data)))
        self._delete_acked(keep_last=False)

    def __len__(self) -> int:
        """Records not acknowledged."""
        with self._lock:
            return len(self._held)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last record written (or used up by a failed write)."""
        with self._lock:
            return self._next - 1

    @property
    def bytes(self) -> int:
        """Bytes the segments hold now, acknowledged records not deleted yet included."""
        with self._lock:
            return sum(size for _, _, size in self._segments)

    @property
    def held_bytes(self) -> int:
        """Bytes of the records not acknowledged, headers included."""
        with self._lock:
            return self._held_bytes

    @property
    def full(self) -> bool:
        """True once the records not acknowledged hold ``limit_bytes``."""
        with self._lock:
            return self._held_bytes >= self.limit_bytes

    def fits(self, size: int, besides: int = 0) -> bool:
        """Whether a record of ``size`` payload bytes stays within ``limit_bytes``, with
        ``besides`` bytes held elsewhere counted against the same bound."""
        with self._lock:
            return self._held_bytes + besides + HEADER.size + size <= self.limit_bytes

    def held(self) -> Iterator[tuple[Record, bytes]]:
        """Every record not acknowledged with its payload, oldest first (each segment read
        once; the payloads as checked when the log was opened or written).

        Raises:
            OSError: a segment cannot be read.
        """
        with self._lock:
            records = list(self._held)
        data, segment = b"", None
        for record in records:
            if record.segment != segment:
                segment = record.segment
                data = segment.read_bytes()
            yield record, data[record.offset : record.offset + record.size]

    def read(self, record: Record, limit: int | None = None) -> bytes:
        """The payload of ``record``, or its first ``limit`` bytes.

        Raises:
            OSError: its segment cannot be read (removed from under the log).
            ValueError: the payload is cut short, or fails its CRC (changed on disk).
        """
        size = record.size if limit is None else min(limit, record.size)
        with record.segment.open("rb") as segment:
            segment.seek(record.offset)
            payload = segment.read(size)
        if len(payload) < size:
            raise ValueError(f"record {record.seq} of {record.segment} is cut short")
        if size == record.size and zlib.crc32(payload) != record.crc:
            raise ValueError(f"record {record.seq} of {record.segment} fails its CRC")
        return payload

    def append(self, payload: bytes) -> Record:
        """Write ``payload`` as the next record at the tail (durable once :meth:`sync`
        returns).

        Raises:
            OSError: the write failed; its bytes are cut off again where the segment allows,
                and its sequence number is used up.
        """
        crc = zlib.crc32(payload)
        with self._lock:
            seq = self._next
            self._next = seq + 1  # used up even by a failed write: segment names stay unique
            data = HEADER.pack(len(payload), crc, seq) + payload
            try:
                self._write(seq, data)
            except OSError:
                self._cut_torn()
                raise
            record = Record(
                seq, self._segments[-1][1], self._written + HEADER.size, len(payload), crc
            )
            self._written += len(data)
            first, path, size = self._segments[-1]
            self._segments[-1] = (first, path, size + len(data))
            self._hold(record)
            self._dirty = True
        return record

    def _write(self, seq: int, data: bytes) -> None:
        """Write one record to the open segment; a new one when it is full, or when it was
        removed from under the log (a write there would be lost)."""
        if self._fd is not None and (
            self._written >= self.segment_bytes or os.fstat(self._fd).st_nlink == 0
        ):
            self._close_segment()
        if self._fd is None:
            self._open_segment(seq)
        assert self._fd is not None
        view = memoryview(data)
        while view:  # a short write is followed by one that says why it fell short
            view = view[os.write(self._fd, view) :]

    def _cut_torn(self) -> None:
        """Truncate the open segment to its last whole record; if that fails, close it (a
        torn record then ends the segment, skipped when read)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, self._written)
        except OSError:
            self._close_segment()

    def _hold(self, record: Record) -> None:
        self._held.append(record)
        self._held_bytes += record.bytes

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
            if not self._dirty or self._fd is None:
                return
            if self.fsync:
                os.fsync(self._fd)
            self._dirty = False

    def ack(self, seq: int) -> None:
        """Every record up to ``seq`` is done with: recorded in ``acked``, and the segments
        wholly before it go (not the open one). An ack that cannot be recorded (a full
        disk) is logged once until one is recorded again; the records of segments still on
        disk then come back once more in the next process."""
        with self._lock:
            if seq <= self._acked:
                return
            self._acked = seq
            while self._held and self._held[0].seq <= seq:
                self._held_bytes -= self._held.popleft().bytes
            try:
                self._record_ack(seq)
            except OSError as exc:
                if not self._ack_failing:
                    logger.warning("log %s: cannot record ack %d: %s", self.directory, seq, exc)
                self._ack_failing = True
            else:
                self._ack_failing = False
            self._delete_acked(keep_last=self._fd is not None)

    def _record_ack(self, seq: int) -> None:
        """Write ``seq`` over ``acked`` in place: one ``pwrite`` of a fixed-width line into
        the file kept open (a rename per ack cost more than the append it acknowledges), so
        a killed process leaves the old number or the new one, never a mix. The file is
        opened again when it was removed from under the log."""
        fd = self._ack_fd
        if fd is None or os.fstat(fd).st_nlink == 0:
            if fd is not None:
                os.close(fd)
            self._ack_fd = None
            fd = os.open(self.directory / _ACKED, os.O_WRONLY | os.O_CREAT, 0o644)
            self._ack_fd = fd
        os.pwrite(fd, f"{seq:>{_ACK_WIDTH}}\n".encode(), 0)

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
        """Close the open segment (synced first with ``fsync=True``) and delete the
        segments wholly acknowledged; safe to call twice. A later :meth:`append` starts a
        new segment."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            if self.fsync and self._dirty:
                os.fsync(fd)
            os.close(fd)
        with self._lock:
            self._dirty = False
            self._delete_acked(keep_last=False)
            ack_fd, self._ack_fd = self._ack_fd, None
        if ack_fd is not None:
            os.close(ack_fd)


def _scan(data: bytes, segment: Path) -> tuple[list[Record], int, int]:
    """The records of a segment's ``data`` whose CRC holds, where the last record read
    ends, and how many whole records failed their CRC. A failed record is stepped over only
    when its end is the data's end or the start of a record that checks (its length field
    is then trusted); otherwise reading stops there, as at a torn tail."""
    out: list[Record] = []
    at = corrupt = 0
    while (record := _record_at(data, at, segment)) is not None:
        record, good = record
        end = record.offset + record.size
        if not good:
            following = _record_at(data, end, segment)
            if end != len(data) and (following is None or not following[1]):
                break
            corrupt += 1
        else:
            out.append(record)
        at = end
    return out, at, corrupt


def _record_at(data: bytes, at: int, segment: Path) -> tuple[Record, bool] | None:
    """The record framed at ``at`` and whether its CRC holds; None when ``data`` ends inside
    it."""
    if at + HEADER.size > len(data):
        return None
    size, crc, seq = HEADER.unpack_from(data, at)
    start = at + HEADER.size
    if start + size > len(data):
        return None
    good = zlib.crc32(data[start : start + size]) == crc
    return Record(seq, segment, start, size, crc), good


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
