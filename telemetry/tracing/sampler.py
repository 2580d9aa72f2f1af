"""The rate limit of span recording: a token bucket of one second's spans.

The bucket holds up to ``burst = max(rate, 1)`` tokens and refills at ``rate`` a second;
each span that opens takes one or is dropped. The recorder asks it only for spans whose
parent was kept: a span under a dropped parent is dropped with it, without a token (no
orphans: a kept span's parent is kept). Over a run at most ``burst + rate * elapsed`` spans
are kept, and exactly that while spans come faster than the rate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["RateLimit"]


class RateLimit:
    """At most ``rate`` spans per second, with a burst of one second's spans.

    Args:
        rate: spans per second, > 0.
        clock: monotonic seconds (tests pass their own).

    Raises:
        ValueError: ``rate`` is not positive.
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0:
            raise ValueError(f"sample rate must be > 0 spans per second, got {rate!r}")
        self.rate = float(rate)
        self.burst = max(self.rate, 1.0)
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()
        self._lock = threading.Lock()
        self.kept = 0
        self.dropped = 0

    def take(self) -> bool:
        """Whether a span may be kept now (takes a token if so)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                self.kept += 1
                return True
            self.dropped += 1
            return False
