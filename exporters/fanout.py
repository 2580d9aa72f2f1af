"""The fan-out over sinks: the same frozen Snapshot to every sink, each behind its own
:class:`~exporters.queued.QueuedSink`, never raising into the caller. Every sink goes the
same way, OTLP included (its queue overflows into its spool).

Admission (the collector's "accepted means kept"): :meth:`FanOut.reserve` takes queue slots
in every healthy sink before a request is answered, so the snapshots it then exports are
queued, never dropped; a degraded sink reserves nothing and keeps its own drop-and-count
policy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from exporters.base import Sink
from exporters.memory_charge import MemoryCharge
from exporters.queued import QueuedSink, SinkStats
from telemetry.model.snapshot import Snapshot

if TYPE_CHECKING:
    from exporters.factory import SinkFactory

__all__ = ["FanOut", "MemoryCharge", "QueuedSink", "Reservation", "SinkStats"]

logger = logging.getLogger(__name__)


class Reservation:
    """Queue slots taken by :meth:`FanOut.reserve`; :meth:`release` returns the unused ones."""

    __slots__ = ("_held",)

    def __init__(self, held: dict[QueuedSink, int]) -> None:
        self._held = held

    def take(self, queued: QueuedSink) -> bool:
        left = self._held.get(queued, 0)
        if left <= 0:
            return False
        self._held[queued] = left - 1
        return True

    def release(self) -> None:
        for queued, left in self._held.items():
            if left > 0:
                queued.release(left)
        self._held = {}


class FanOut:
    """Hands every snapshot to every sink through its own :class:`QueuedSink`.

    Args:
        sinks: the sinks; names that repeat get ``#2``, ``#3`` suffixes in :meth:`stats`.
        queue_size: per-sink queue bound (a sink's own ``delivery`` policy wins).
        timeout_s: per-export timeout of each sink (likewise).
    """

    def __init__(
        self, sinks: Iterable[Sink], queue_size: int = 1024, timeout_s: float = 10.0
    ) -> None:
        self.queued: list[QueuedSink] = []
        seen: dict[str, int] = {}
        for sink in sinks:
            base = sink.name
            seen[base] = seen.get(base, 0) + 1
            name = base if seen[base] == 1 else f"{base}#{seen[base]}"
            self.queued.append(QueuedSink.of(sink, queue_size, timeout_s, name=name))

    def built_by(self, factory: SinkFactory) -> Sink | None:
        """The first sink ``factory`` built (its :attr:`~exporters.base.Sink.factory`), or None."""
        return next((q.sink for q in self.queued if q.sink.factory is factory), None)

    def export(
        self,
        snapshot: Snapshot,
        charge: MemoryCharge | None = None,
        reservation: Reservation | None = None,
    ) -> bool:
        """Queue ``snapshot`` for every sink without blocking; never raises.

        Args:
            snapshot: the snapshot, shared read-only by every sink.
            charge: held by every queued copy (see :class:`MemoryCharge`).
            reservation: slots taken by :meth:`reserve`; each sink uses one if it has one.

        Returns:
            True when every sink's queue accepted it (rejections are counted as dropped).
        """
        accepted = True
        for queued in self.queued:
            reserved = reservation is not None and reservation.take(queued)
            try:
                accepted = queued.submit(snapshot, charge, reserved) and accepted
            except Exception as exc:  # never reaches the training loop
                accepted = False
                logger.warning("sink %s: submit failed: %s", queued.name, exc)
        return accepted

    def reserve(self, n: int) -> Reservation | None:
        """Take ``n`` slots in every healthy sink's queue, or none at all (None)."""
        held: dict[QueuedSink, int] = {}
        for queued in self.queued:
            got = queued.reserve(n)
            if got is None:
                Reservation(held).release()
                return None
            held[queued] = got
        return Reservation(held)

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Flush every sink concurrently within one deadline; True when all succeeded."""
        deadline = time.monotonic() + timeout_s
        markers = [queued.request_flush(timeout_s) for queued in self.queued]
        ok = True
        for marker in markers:
            remaining = max(0.0, deadline - time.monotonic())
            ok = marker is not None and marker.done.wait(remaining) and marker.ok and ok
        return ok

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Drain and shut every sink down within one shared deadline; safe to call twice."""
        deadline = time.monotonic() + timeout_s
        for queued in self.queued:
            queued.close(timeout_s)
        for queued in self.queued:
            queued.shutdown(max(0.0, deadline - time.monotonic()))

    def stats(self) -> dict[str, SinkStats]:
        """Counters of every sink, by name."""
        return {queued.name: queued.stats() for queued in self.queued}
