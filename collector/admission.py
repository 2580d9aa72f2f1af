"""Admission control: what the collector may take before it answers a request.

"Accepted means kept": a request is answered OK only once every healthy sink's queue has
room for its snapshots and the memory budget has room for what it holds. Otherwise the
sender gets a retryable status with a retry delay and the collector keeps nothing of it.

The memory budget counts the data the collector holds, not wire bytes: a request being
parsed and decoded is charged ``PARSE_EXPANSION`` times its wire size (a protobuf message
of empty data points takes ~15x its wire size once parsed), and an admitted request is
charged :func:`decoded_bytes` of its snapshots until the last sink is done with them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Histogram, Snapshot

PARSE_EXPANSION = 16
POINT_BYTES = 232  # a point object, its value and metric name, its slot in the snapshot
HISTOGRAM_EXTRA_BYTES = 96
ATTRIBUTE_BYTES = 120  # a (key, value) tuple and two string headers
SNAPSHOT_BYTES = 400


@dataclass(frozen=True)
class RequestLimits:
    """Bounds on the work one request may cause, and on concurrent heavy requests.

    Attributes:
        max_points_per_request: data points in one request at most; more is refused
            with INVALID_ARGUMENT (the sender must split it: retrying cannot help).
        max_decoded_bytes: :func:`decoded_bytes` of one request at most (INVALID_ARGUMENT).
        heavy_request_bytes: a request larger than this on the wire, or with more than
            ``heavy_request_points`` points, is heavy.
        heavy_request_points: see ``heavy_request_bytes``.
        max_heavy_requests: heavy requests parsed or decoded at once; one more is refused
            with RESOURCE_EXHAUSTED, so small requests keep their latency.
        retry_after_s: the delay suggested to refused senders.
        deadline_margin_s: a request with less time than this left is not ingested (its
            answer could not reach the sender in time).
    """

    max_points_per_request: int = 50_000
    max_decoded_bytes: int = 32 * 1024 * 1024
    heavy_request_bytes: int = 256 * 1024  # 1 MiB let 400 KB floods delay small exports 1-2 s
    heavy_request_points: int = 10_000
    max_heavy_requests: int = 1
    retry_after_s: float = 0.5
    deadline_margin_s: float = 0.005

    def validate(self, path: str = "collector.limits") -> None:
        """Raises ConfigError naming the first value out of range."""
        for name in (
            "max_points_per_request",
            "max_decoded_bytes",
            "heavy_request_bytes",
            "heavy_request_points",
            "max_heavy_requests",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{path}.{name} must be an integer >= 1, got {value!r}")
        for name in ("retry_after_s", "deadline_margin_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{path}.{name} must be a number >= 0, got {value!r}")


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

    def acquire(self, nbytes: int, replacing: Hold | None = None) -> bool:
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

    def hold(self, nbytes: int) -> Hold | None:
        """A :class:`Hold` of ``nbytes`` if they fit (see :meth:`acquire`), else None."""
        return Hold(self, nbytes) if self.acquire(nbytes) else None

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._held -= nbytes


class Hold:
    """Bytes held for one request in flight; ``release()`` is safe to call twice."""

    __slots__ = ("budget", "nbytes")

    def __init__(self, budget: MemoryBudget, nbytes: int) -> None:
        self.budget = budget
        self.nbytes = nbytes

    def release(self) -> None:
        nbytes, self.nbytes = self.nbytes, 0
        if nbytes:
            self.budget.release(nbytes)


class HeavyGate:
    """At most ``slots`` heavy requests at once; never waits."""

    def __init__(self, slots: int) -> None:
        self._slots = threading.Semaphore(slots)

    def try_enter(self) -> bool:
        return self._slots.acquire(blocking=False)

    def leave(self) -> None:
        self._slots.release()


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
