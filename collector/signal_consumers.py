"""The consumers of one signal: every accepted trace or logs request handed to each, in order.

A consumer that raises is logged at its first failure of a run (and when it works again)
and counted; it loses that request, and the others still get it. ``flush()`` and
``shutdown(timeout_s)`` reach the consumers that define them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from google.protobuf.message import Message

__all__ = ["SignalConsumers"]

logger = logging.getLogger(__name__)


class SignalConsumers:
    """Hands each request of one signal to every consumer, in order.

    Args:
        signal: the signal's name (``traces``, ``logs``), for messages.
        method: the consumers' method (``consume_traces``, ``consume_logs``).
        consumers: the consumers, called on the caller's thread.
    """

    def __init__(self, signal: str, method: str, consumers: Sequence[object]) -> None:
        self.signal = signal
        self.method = method
        self.consumers = list(consumers)
        self._lock = threading.Lock()
        self._failing: dict[int, int] = {}  # consumer index -> failures in a row
        self._errors = 0

    @property
    def errors(self) -> int:
        """Consumer calls that raised."""
        with self._lock:
            return self._errors

    def consume(self, request: Message) -> None:
        """Call every consumer with ``request``; one that raises is logged and counted."""
        for index, consumer in enumerate(self.consumers):
            try:
                getattr(consumer, self.method)(request)
            except Exception as exc:  # one consumer's bug costs it this request, no more
                with self._lock:
                    self._errors += 1
                    failures = self._failing[index] = self._failing.get(index, 0) + 1
                if failures == 1:
                    logger.error(
                        "collector: %s consumer %s failed: %s: %s (repeats counted)",
                        self.signal,
                        type(consumer).__name__,
                        type(exc).__name__,
                        exc,
                    )
            else:
                if self._failing.get(index):
                    with self._lock:
                        failures = self._failing.pop(index, 0)
                    logger.warning(
                        "collector: %s consumer %s works again after %d failures",
                        self.signal,
                        type(consumer).__name__,
                        failures,
                    )

    def flush(self) -> bool:
        """Every consumer's ``flush()`` (those without one hold what they consumed)."""
        results = [bool(getattr(c, "flush", lambda: True)()) for c in self.consumers]
        return all(results)

    def shutdown(self, timeout_s: float) -> bool:
        """Shut every consumer down; False when one raised (what it held may be lost)."""
        clean = True
        for consumer in self.consumers:
            stop = getattr(consumer, "shutdown", None)
            if stop is not None:
                try:
                    stop(timeout_s)
                except Exception:
                    clean = False
                    logger.exception("collector: %s consumer shutdown failed", self.signal)
        return clean
