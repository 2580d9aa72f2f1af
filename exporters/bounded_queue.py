"""The bounded queue of one queued sink: snapshots and flush requests in order, slots
reserved for admitted requests, and the drain deadline once it is closed.

The caller side of :class:`~exporters.queued.QueuedSink` puts items in; its worker
(:class:`~exporters.queue_worker.QueueWorker`) takes them out, and waits on
:attr:`BoundedQueue.cond` between retries (``submit`` and ``close`` wake it).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporters.memory_charge import MemoryCharge
    from telemetry.model.snapshot import Snapshot

__all__ = ["BoundedQueue", "Flush", "Queued"]


class Flush:
    """A flush request travelling through the queue behind earlier snapshots."""

    __slots__ = ("done", "ok", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.ok = False
        self.done = threading.Event()


Queued = tuple["Snapshot", "MemoryCharge | None", "int | None"]
"""A queued snapshot, the charge it holds and its journal sequence number (None: none)."""


class BoundedQueue:
    """Snapshots (at most ``size``, counting reserved slots) and flush requests, in order.

    Attributes:
        size: snapshots queued or reserved at most.
        cond: guards the queue; notified when an item arrives or the backlog closes.
        spill_lock: held while snapshots move to the overflow, so spills keep their order.
        depth: snapshots queued now.
        closed: no more snapshots are taken.
        deadline: after :meth:`close`, when the worker stops draining (monotonic seconds).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.cond = threading.Condition()
        self.spill_lock = threading.Lock()
        self._items: deque[Queued | Flush] = deque()
        self._reserved = 0  # slots promised to admitted requests, not yet filled
        self.depth = 0
        self.closed = False
        self.deadline: float | None = None

    def offer(
        self,
        snapshot: Snapshot,
        charge: MemoryCharge | None,
        reserved: bool,
        write: Callable[[Snapshot], int | None] | None = None,
    ) -> bool:
        """Queue ``snapshot`` (into a slot of :meth:`reserve` if ``reserved``); False when
        full or closed. A queued snapshot holds ``charge``; ``write`` (the journal's
        append) is called once it is taken, in queue order, and gives its sequence number."""
        with self.cond:
            if reserved and self._reserved > 0:
                self._reserved -= 1
                refused = self.closed
            else:
                refused = self.depth + self._reserved >= self.size or self.closed
            if not refused:
                if charge is not None:
                    charge.hold()
                seq = write(snapshot) if write is not None else None
                self._items.append((snapshot, charge, seq))
                self.depth += 1
                self.cond.notify()
        return not refused

    def restore(self, items: Iterable[Queued]) -> None:
        """Queue ``items`` (an earlier process's journal) whatever the size bound."""
        with self.cond:
            for item in items:
                self._items.append(item)
                self.depth += 1
            self.cond.notify()

    def reserve(self, n: int, degraded: bool) -> int | None:
        """Take ``n`` slots; None when they are not free or the backlog is closed.

        An empty backlog always takes one request, however large; a ``degraded`` sink's
        reserves nothing (0), so that it never makes the collector refuse.
        """
        with self.cond:
            if self.closed:
                return None
            if degraded:
                return 0
            used = self.depth + self._reserved
            if used and used + n > self.size:
                return None
            self._reserved += n
            return n

    def release(self, n: int) -> None:
        """Give back reserved slots that were not filled."""
        with self.cond:
            self._reserved = max(0, self._reserved - n)

    def add_flush(self, marker: Flush) -> bool:
        """Queue ``marker`` behind everything queued now (beyond ``size``); False when closed."""
        with self.cond:
            if self.closed:
                return False
            self._items.append(marker)
            self.cond.notify()
            return True

    def close(self, timeout_s: float) -> None:
        """Take no more snapshots; the worker drains until ``timeout_s`` from now."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.deadline = time.monotonic() + timeout_s
            self.cond.notify_all()

    def past_deadline(self) -> bool:
        """True once the drain deadline of :meth:`close` has passed."""
        deadline = self.deadline
        return deadline is not None and time.monotonic() > deadline

    def take(self) -> Queued | Flush | None:
        """The oldest item, waiting for one; None once closed and empty, or past the drain
        deadline (what is left is for shutdown to drop or spill)."""
        with self.cond:
            while not self._items and not self.closed:
                self.cond.wait()
            if not self._items or self.past_deadline():
                return None
            item = self._items.popleft()
            if not isinstance(item, Flush):
                self.depth -= 1
            return item

    def wait(self, timeout_s: float) -> None:
        """Sleep up to ``timeout_s``, woken early by an arriving item or by :meth:`close`."""
        with self.cond:
            self.cond.wait(timeout_s)

    def take_snapshots(self) -> list[Queued]:
        """Every queued snapshot, in order, removed; flush requests stay queued."""
        with self.cond:
            items = list(self._items)
            self._items = deque(item for item in items if isinstance(item, Flush))
            self.depth = 0
        return [item for item in items if not isinstance(item, Flush)]

    def take_all(self) -> list[Queued | Flush]:
        """Every queued item, in order, removed."""
        with self.cond:
            items = list(self._items)
            self._items.clear()
            self.depth = 0
        return items
