"""A bounded on-disk FIFO of OTLP batches: what the collector could not take yet.

The spool is a :class:`~exporters.record_log.RecordLog` in the spool directory (under the
run directory): each metric batch (its JSON form is :mod:`telemetry.otlp.batch`'s) and each
trace or logs request (:mod:`exporters.otlp.signal_requests`: format 2) is one record, a
first line ``<points>`` or ``<items>.<signal>`` and then the entry's JSON. Records are
appended whole (a write that fails is cut off again) and checked by their CRC when read,
so a process killed mid-write leaves no entry that is read back torn or twice; a delivered
entry is acknowledged (:meth:`Spool.pop`) before the next is sent, so a kill resends at
most the one in flight. Entries left by
an earlier process are picked up on construction and replayed first, in order; so are the
entries of a spool of an earlier version (one file ``<seq>-<points>.json`` or
``<seq>-<items>.<signal>.json`` per entry), before the log's, each file removed once
delivered; only the log is written. Beyond ``limit_bytes`` new batches are dropped and their
points counted; the entries never hold more than the limit (acknowledged records keep at
most one segment of :data:`SEGMENT_BYTES` on disk besides).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from exporters.otlp.failure_run import FailureRun
from exporters.otlp.signal_requests import (
    SIGNAL_FORMAT,
    SignalRequest,
    signal_from_json,
    signal_to_json,
)
from exporters.record_log import Record, RecordLog
from telemetry.otlp.batch import Batch, batch_from_dict, batch_from_json, batch_to_json

__all__ = ["SEGMENT_BYTES", "Spool", "batch_from_json", "batch_to_json", "part_from_json"]

Part = Batch | SignalRequest
"""One spool entry: a metric batch, or a trace or logs request."""

logger = logging.getLogger(__name__)

SEGMENT_BYTES = 256 * 1024
"""A spool's segments are small: a delivered segment gives its disk back soon."""
_HEAD_BYTES = 65536  # an entry's head: everything before its points (resource, step)
_STEP = re.compile(r'"step":\[-?\d+,-?\d+,(-?\d+)\]')
_SIGNALS = ("traces", "logs")


@dataclass(frozen=True, slots=True)
class _Entry:
    """One entry held: where it lies (a record of the log, or a file of an earlier
    version), its bytes on disk, and what it counts."""

    where: Record | Path
    bytes: int
    points: int


class Spool:
    """FIFO of batches on disk, bounded by bytes.

    Args:
        directory: where entries live; created if missing.
        limit_bytes: total size of all entries at most.

    Attributes:
        spooled_points: metric points written to the spool.
        dropped_points: metric points dropped (over the limit, a failed write, unreadable).
        dropped_batches: entries dropped.
        dropped_items: spans and log records dropped (over the limit, a failed write).

    Raises:
        ValueError: ``limit_bytes`` < 1.
        OSError: the directory cannot be created or read.
    """

    def __init__(self, directory: str | Path, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError(f"spool limit_bytes must be >= 1, got {limit_bytes}")
        self.directory = Path(directory)
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self._entries: deque[_Entry] = deque()
        self._earlier_bytes = 0  # of the entries in files of an earlier version
        self._bytes = 0
        self._points = 0
        self.spooled_points = 0
        self.dropped_points = 0
        self.dropped_batches = 0
        self.dropped_items = {"traces": 0, "logs": 0}  # spans, log records
        self._full = FailureRun()  # appends refused for the byte limit, in a row
        self._unwritable = FailureRun()  # appends whose write failed (a full disk), in a row
        self._log = RecordLog(self.directory, limit_bytes, fsync=False, segment_bytes=SEGMENT_BYTES)
        for path, size, points in _earlier_entries(self.directory):
            self._hold(_Entry(path, size, points))
            self._earlier_bytes += size
        for record, payload in self._log.held():
            count = payload.partition(b"\n")[0].decode("ascii", "replace")
            self._hold(_Entry(record, record.bytes, _points(count) or 0))
        if self._log.unreadable:
            logger.warning(
                "otlp spool: %s: %d records torn or failing their CRC, skipped",
                self.directory,
                self._log.unreadable,
            )

    def _hold(self, entry: _Entry) -> None:
        self._entries.append(entry)
        self._bytes += entry.bytes
        self._points += entry.points

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes the entries hold on disk now."""
        with self._lock:
            return self._bytes

    @property
    def points(self) -> int:
        """Data points held on disk now."""
        with self._lock:
            return self._points

    @property
    def unreadable(self) -> int:
        """Records skipped when the spool was opened: torn, or failing their CRC."""
        return self._log.unreadable

    def append(self, batch: Part) -> bool:
        """Write ``batch`` at the tail; False (points counted as dropped) when over the limit
        or when the write fails (a full disk). Either is logged once when it starts and once
        when an append succeeds again, with what it dropped."""
        signal = isinstance(batch, SignalRequest)
        count = f"{batch.items}.{batch.signal}" if signal else str(batch.num_points)
        text = signal_to_json(batch) if signal else batch_to_json(batch)
        payload = f"{count}\n{text}".encode()
        error: OSError | None = None
        with self._lock:
            full = not self._log.fits(len(payload), besides=self._earlier_bytes)
            if not full:
                try:
                    record = self._log.append(payload)
                except OSError as exc:
                    error = exc
                else:
                    self._hold(_Entry(record, record.bytes, batch.num_points))
                    self.spooled_points += batch.num_points
        if full:
            self._drop(batch, self._full)
            if self._full.failed(batch.num_points):
                logger.warning(
                    "otlp spool: %s is at its limit of %d bytes (otlp.spool_limit_bytes); "
                    "new batches are dropped and counted in points_dropped",
                    self.directory,
                    self.limit_bytes,
                )
            return False
        if error is not None:
            self._drop(batch, self._unwritable)
            if self._unwritable.failed(batch.num_points):
                logger.warning(
                    "otlp spool: cannot write %s: %s; batches are dropped and counted in "
                    "points_dropped until a write succeeds",
                    self.directory,
                    error,
                )
            return False
        self._recovered()
        return True

    def _drop(self, batch: Part, cause: FailureRun) -> None:
        with self._lock:
            self.dropped_points += batch.num_points
            self.dropped_batches += 1
            if isinstance(batch, SignalRequest):
                self.dropped_items[batch.signal] += batch.items
        other = self._unwritable if cause is self._full else self._full
        self._log_end(other)

    def _recovered(self) -> None:
        self._log_end(self._full)
        self._log_end(self._unwritable)

    def _log_end(self, run: FailureRun) -> None:
        end = run.succeeded()
        if end is not None:
            now = "has room again" if run is self._full else "takes writes again"
            logger.warning(
                "otlp spool: %s %s; %d batches (%d points) were dropped meanwhile%s",
                self.directory,
                now,
                end.failures,
                end.points,
                end.over(),
            )

    def peek(self) -> Part | None:
        """The oldest entry, or None when empty; unreadable entries are dropped and counted."""
        while True:
            with self._lock:
                if not self._entries:
                    return None
                entry = self._entries[0]
            try:
                return part_from_json(self._read(entry.where))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("otlp spool: dropping unreadable entry %s: %s", entry.where, exc)
                with self._lock:
                    self.dropped_points += entry.points
                    self.dropped_batches += 1
                self.pop()

    def _read(self, where: Record | Path, limit: int | None = None) -> str:
        """An entry's JSON text; with ``limit``, only (about) its first ``limit`` bytes.

        Raises:
            OSError: the entry cannot be read.
            ValueError: a record fails its CRC, or the whole text is no UTF-8.
        """
        if isinstance(where, Path):
            with where.open("rb") as entry:
                data = entry.read(-1 if limit is None else limit)
        else:
            data = self._log.read(where, limit).partition(b"\n")[2]  # after the count
        return data.decode("utf-8", "strict" if limit is None else "replace")

    def steps(self) -> list[int]:
        """The global steps of the metric batches on disk, oldest first (a batch without a
        step, and a trace or logs request, names none). Only each entry's head is read:
        ``batch_to_json`` writes the step before the points."""
        with self._lock:
            entries = list(self._entries)
        found = []
        for entry in entries:
            try:
                head = self._read(entry.where, _HEAD_BYTES)
            except (OSError, ValueError):
                continue
            match = _STEP.search(head)
            if match is not None:
                found.append(int(match.group(1)))
        return found

    def pop(self) -> None:
        """Remove the oldest batch (after it was delivered): a record is acknowledged (its
        segment goes once all of its records are, every segment once the spool is empty),
        a file of an earlier version removed."""
        with self._lock:
            if not self._entries:
                return
            entry = self._entries.popleft()
            self._bytes -= entry.bytes
            self._points -= entry.points
            if isinstance(entry.where, Path):
                self._earlier_bytes -= entry.bytes
                entry.where.unlink(missing_ok=True)
                return
            self._log.ack(entry.where.seq)
            if not self._entries:
                self._log.close()


def _earlier_entries(directory: Path) -> list[tuple[Path, int, int]]:
    """The entries a spool of an earlier version left (path, bytes, metric points), in
    order; the temporary files of its writes cut by a kill are removed."""
    found = []
    for path in sorted(directory.glob("*.json")):
        points = _points_of_name(path)
        if points is not None:
            found.append((path, path.stat().st_size, points))
    for stale in directory.glob("*.tmp"):
        if _points_of_name(stale) is not None:
            stale.unlink(missing_ok=True)
    return found


def _points_of_name(path: Path) -> int | None:
    """The metric points an earlier version's entry name ``<seq>-<count>`` gives; None
    for a name of no entry."""
    seq, _, count = path.stem.partition("-")
    return _points(count) if seq.isdigit() else None


def _points(count: str) -> int | None:
    """The metric points of an entry's count: ``<points>``, or ``<items>.<signal>`` (a
    trace or logs request: none); None when it is no count."""
    items, dot, signal = count.partition(".")
    if not items.isdigit() or (dot and signal not in _SIGNALS):
        return None
    return 0 if dot else int(items)


def part_from_json(text: str) -> Part:
    """A spool entry: a metric batch (format 1) or a trace or logs request (format 2).

    Raises:
        ValueError: the text is no spool entry of a known format.
    """
    data = json.loads(text)
    if data.get("format") == SIGNAL_FORMAT:
        return signal_from_json(data)
    return batch_from_dict(data)
