"""A bounded on-disk FIFO of OTLP batches: what the collector could not take yet.

Each metric batch is one JSON file ``<seq>-<points>.json`` in the spool directory (under
the run directory; the batch's JSON form is :mod:`telemetry.otlp.batch`'s), each trace or
logs request one ``<seq>-<items>.<signal>.json`` (:mod:`exporters.otlp.signal_requests`:
format 2; a spool of an earlier version, format 1 only, is read as before), written to a
temporary name and renamed, so a process killed mid-write leaves no torn entry. Entries
left by an earlier process are picked up on construction and replayed first, in order.
Beyond ``limit_bytes`` new batches are dropped and their points counted; the spool never
grows past its limit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections import deque
from pathlib import Path

from exporters.otlp.failure_run import FailureRun
from exporters.otlp.signal_requests import (
    SIGNAL_FORMAT,
    SignalRequest,
    signal_from_json,
    signal_to_json,
)
from telemetry.otlp.batch import Batch, batch_from_dict, batch_from_json, batch_to_json

__all__ = ["Spool", "batch_from_json", "batch_to_json", "part_from_json"]

Part = Batch | SignalRequest
"""One spool entry: a metric batch, or a trace or logs request."""

logger = logging.getLogger(__name__)

_HEAD_BYTES = 65536  # an entry's head: everything before its points (resource, step)
_STEP = re.compile(r'"step":\[-?\d+,-?\d+,(-?\d+)\]')


class Spool:
    """FIFO of batches on disk, bounded by bytes.

    Args:
        directory: where entries live; created if missing.
        limit_bytes: total size of all entries at most.

    Raises:
        ValueError: ``limit_bytes`` < 1.
        OSError: the directory cannot be created.
    """

    def __init__(self, directory: str | Path, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError(f"spool limit_bytes must be >= 1, got {limit_bytes}")
        self.directory = Path(directory)
        self.limit_bytes = limit_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._entries: deque[tuple[Path, int, int]] = deque()  # path, bytes, points
        self._bytes = 0
        self._points = 0
        self.spooled_points = 0
        self.dropped_points = 0
        self.dropped_batches = 0
        self.dropped_items = {"traces": 0, "logs": 0}  # spans, log records
        self._next_seq = 0
        self._full = FailureRun()  # appends refused for the byte limit, in a row
        self._unwritable = FailureRun()  # appends whose write failed (a full disk), in a row
        for path in sorted(self.directory.glob("*.json")):
            seq, points = _parse_name(path)
            if seq is None:
                continue
            size = path.stat().st_size
            self._entries.append((path, size, points))
            self._bytes += size
            self._points += points
            self._next_seq = seq + 1
        for stale in self.directory.glob("*.tmp"):
            stale.unlink(missing_ok=True)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes held on disk now."""
        with self._lock:
            return self._bytes

    @property
    def points(self) -> int:
        """Data points held on disk now."""
        with self._lock:
            return self._points

    def append(self, batch: Part) -> bool:
        """Write ``batch`` at the tail; False (points counted as dropped) when over the limit
        or when the write fails (a full disk). Either is logged once when it starts and once
        when an append succeeds again, with what it dropped."""
        signal = isinstance(batch, SignalRequest)
        data = (signal_to_json(batch) if signal else batch_to_json(batch)).encode()
        with self._lock:
            full = self._bytes + len(data) > self.limit_bytes
            seq = self._next_seq
            self._next_seq += not full
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
        count = f"{batch.items}.{batch.signal}" if signal else str(batch.num_points)
        path = self.directory / f"{seq:012d}-{count}.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as exc:
            _remove(tmp)
            self._drop(batch, self._unwritable)
            if self._unwritable.failed(batch.num_points):
                logger.warning(
                    "otlp spool: cannot write %s: %s; batches are dropped and counted in "
                    "points_dropped until a write succeeds",
                    path,
                    exc,
                )
            return False
        with self._lock:
            self._entries.append((path, len(data), batch.num_points))
            self._bytes += len(data)
            self._points += batch.num_points
            self.spooled_points += batch.num_points
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
                path, _, points = self._entries[0]
            try:
                return part_from_json(path.read_text())
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("otlp spool: dropping unreadable entry %s: %s", path, exc)
                with self._lock:
                    self.dropped_points += points
                    self.dropped_batches += 1
                self.pop()

    def steps(self) -> list[int]:
        """The global steps of the metric batches on disk, oldest first (a batch without a
        step, and a trace or logs request, names none). Only each entry's head is read:
        ``batch_to_json`` writes the step before the points."""
        with self._lock:
            paths = [path for path, _, _ in self._entries]
        found = []
        for path in paths:
            try:
                with path.open("rb") as entry:
                    head = entry.read(_HEAD_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            match = _STEP.search(head)
            if match is not None:
                found.append(int(match.group(1)))
        return found

    def pop(self) -> None:
        """Remove the oldest batch (after it was delivered)."""
        with self._lock:
            if not self._entries:
                return
            path, size, points = self._entries.popleft()
            self._bytes -= size
            self._points -= points
        path.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    """Remove a torn temporary file if possible (a later start removes what is left)."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def _parse_name(path: Path) -> tuple[int | None, int]:
    """The sequence number and metric points of an entry's name (a signal's: none)."""
    seq, _, count = path.stem.partition("-")
    count, dot, signal = count.partition(".")
    if not (seq.isdigit() and count.isdigit()) or (dot and signal not in ("traces", "logs")):
        return None, 0
    return int(seq), 0 if dot else int(count)


def part_from_json(text: str) -> Part:
    """A spool entry: a metric batch (format 1) or a trace or logs request (format 2).

    Raises:
        ValueError: the text is no spool entry of a known format.
    """
    data = json.loads(text)
    if data.get("format") == SIGNAL_FORMAT:
        return signal_from_json(data)
    return batch_from_dict(data)
