"""Memory accounting across sink queues: bytes held until the last sink is done."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["MemoryCharge"]


class MemoryCharge:
    """Bytes held while any sink still holds one request's snapshots; released once.

    Starts with one hold (the admitting caller's); every queued copy adds one.
    """

    __slots__ = ("_holds", "_lock", "_release", "nbytes")

    def __init__(self, nbytes: int, release: Callable[[int], None]) -> None:
        self.nbytes = nbytes
        self._release = release
        self._holds = 1
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self._holds += 1

    def done(self) -> None:
        """Drop one hold; the last one releases ``nbytes``."""
        with self._lock:
            self._holds -= 1
            last = self._holds == 0
        if last:
            self._release(self.nbytes)
