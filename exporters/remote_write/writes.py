"""The remote-write sink's backlog: encoded writes in order, bounded by the samples they hold.

Not thread-safe: the sink's lock guards it. The batch being sent is off the queue but still
counted in :attr:`Writes.pending` until :meth:`Writes.done`; a write taken up from an
earlier process's kept backlog is marked ``kept`` (:mod:`exporters.remote_write.kept_backlog`).
"""

from __future__ import annotations

from collections import deque

__all__ = ["Write", "Writes"]


class Write:
    """One encoded write: its payload, its samples, its newest sample's time (ms)."""

    __slots__ = ("kept", "newest_ms", "payload", "samples")

    def __init__(self, payload: bytes, samples: int, newest_ms: int, kept: bool = False) -> None:
        self.payload, self.samples, self.newest_ms = payload, samples, newest_ms
        self.kept = kept  # taken up from an earlier process's kept backlog


class Writes:
    """The backlog and the batch being sent."""

    def __init__(self) -> None:
        self.queue: deque[Write] = deque()
        self.pending = 0  # samples queued and in the batch being sent
        self.inflight: list[Write] = []  # the batch being sent
        self.sending = 0  # samples of the batch being sent

    def add(self, write: Write, bound: int) -> list[Write]:
        """Queue ``write`` at the tail; the oldest writes dropped to keep ``pending`` within
        ``bound`` (plus the batch being sent; the newest write always stays)."""
        self.queue.append(write)
        self.pending += write.samples
        dropped = []
        while self.pending > bound + self.sending and len(self.queue) > 1:
            dropped.append(self.queue.popleft())
            self.pending -= dropped[-1].samples
        return dropped

    def put_first(self, writes: list[Write]) -> None:
        """Queue ``writes`` ahead of everything, in their order."""
        self.queue.extendleft(reversed(writes))
        self.pending += sum(write.samples for write in writes)

    def take(self, oldest_ms: int, max_samples: int) -> tuple[list[Write], list[Write]]:
        """The next batch (at most ``max_samples`` unless one write holds more), now in
        flight, and the writes dropped because their newest sample is before ``oldest_ms``."""
        batch: list[Write] = []
        too_old: list[Write] = []
        samples = 0
        while self.queue:
            write = self.queue[0]
            if write.newest_ms < oldest_ms:
                too_old.append(self.queue.popleft())
                self.pending -= write.samples
                continue
            if batch and samples + write.samples > max_samples:
                break
            batch.append(self.queue.popleft())
            samples += write.samples
        self.inflight, self.sending = batch, samples
        return batch, too_old

    def done(self) -> list[Write]:
        """The batch in flight left (sent or refused): no longer pending."""
        batch, self.inflight = self.inflight, []
        self.pending -= self.sending
        self.sending = 0
        return batch

    def clear(self) -> list[Write]:
        """Everything undelivered, the batch in flight first; the backlog is empty after."""
        left = [*self.inflight, *self.queue]
        self.queue.clear()
        self.inflight, self.pending, self.sending = [], 0, 0
        return left
