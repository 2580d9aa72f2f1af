"""Admission control: what the collector may take before it answers a request.

"Accepted means kept": a request is answered OK only once every healthy sink's queue has
room for its snapshots and the memory budget has room for what it holds. Otherwise the
sender gets a retryable status with a retry delay and the collector keeps nothing of it.

The memory budget counts the data the collector holds, not wire bytes: a request being
parsed and decoded is charged ``PARSE_EXPANSION`` times its wire size (a protobuf message
of empty data points takes ~15x its wire size once parsed), and an admitted request is
charged :func:`decoded_bytes` of its snapshots until the last sink is done with them. The
bounds per request are keys of ``collector.limits`` (:class:`collector.config.LimitsConfig`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from exporters.memory_charge import MemoryCharge
from telemetry.model.snapshot import Histogram, Snapshot

PARSE_EXPANSION = 16
POINT_BYTES = 232  # a point object, its value and metric name, its slot in the snapshot
HISTOGRAM_EXTRA_BYTES = 96
ATTRIBUTE_BYTES = 120  # a (key, value) tuple and two string headers
SNAPSHOT_BYTES = 400


class MemoryBudget:
    """Bytes the collector holds, bounded by ``limit``; thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._peak = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held

    @property
    def peak(self) -> int:
        return self._peak

    def acquire(self, nbytes: int, replacing: MemoryCharge | None = None) -> bool:
        """Hold ``nbytes`` if they fit (or if nothing else is held); False holds nothing.

        Args:
            nbytes: bytes to hold.
            replacing: a hold that these bytes take over on success (its bytes go).
        """
        with self._lock:
            others = self._held - (replacing.nbytes if replacing is not None else 0)
            if others and others + nbytes > self.limit:
                return False
            self._held = others + nbytes
            self._peak = max(self._peak, self._held)
            if replacing is not None:
                replacing.nbytes = 0
            return True

    def hold(self, nbytes: int) -> MemoryCharge | None:
        """``nbytes`` held if they fit (see :meth:`acquire`), else None: a request's charge
        in flight, released by its ``done()``."""
        return MemoryCharge(nbytes, self.release) if self.acquire(nbytes) else None

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._held -= nbytes


def decoded_bytes(snapshots: Iterable[Snapshot]) -> int:
    """An estimate of the memory the decoded snapshots hold (calibrated with tracemalloc)."""
    total = 0
    for snapshot in snapshots:
        total += SNAPSHOT_BYTES + len(snapshot.points) * POINT_BYTES
        for point in snapshot.points:
            attrs = point.attributes
            if attrs:
                total += len(attrs) * ATTRIBUTE_BYTES
                for key, value in attrs:
                    total += len(key) + (len(value) if isinstance(value, str) else 8)
            if isinstance(point, Histogram):
                total += HISTOGRAM_EXTRA_BYTES + 16 * len(point.bucket_counts)
    return total
