"""The remote-write sink's sample counters, its link state, and one log line per change.

The link to the receiver is ``ok``, ``down`` (connection errors, timeouts, 429/5xx: the
writes stay in the backlog and are retried) or ``refusing`` (another 4xx: the refused samples
are dropped and counted). Each change of state is logged once; while the link is not ok a
summary with counts follows every ``summary_s``; the first drop of each reason (backlog
full, too old, refused, shutdown) in a degraded period is logged once, later ones are in the
summaries. Requests and samples are never logged one by one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from exporters.prometheus.families import Family, describe

logger = logging.getLogger("exporters.remote_write")

PREFIX = "rltel_collector_remote_write_"
_SENT, _REJECTED, _DROPPED, _LATE, _RETRIES, _PENDING, _DEGRADED, _LAST_SUCCESS = _DECLARED = (
    Family(f"{PREFIX}samples_sent", "counter", "samples the receiver accepted"),
    Family(f"{PREFIX}samples_rejected", "counter", "samples the receiver refused (4xx)"),
    Family(
        f"{PREFIX}samples_dropped",
        "counter",
        "samples given up unsent, by reason (backlog_full, too_old, refused, shutdown)",
        ("reason",),
    ),
    Family(
        f"{PREFIX}samples_late",
        "counter",
        "samples older than their series' last written one, written 1 ms after it",
    ),
    Family(f"{PREFIX}retries", "counter", "write requests retried"),
    Family(f"{PREFIX}samples_pending", "gauge", "samples waiting in the backlog"),
    Family(f"{PREFIX}degraded", "gauge", "1 while the receiver is down or refusing writes"),
    Family(
        f"{PREFIX}last_success_timestamp_seconds",
        "gauge",
        "Unix time of the last write the receiver accepted (0: none yet)",
    ),
)
"""The sink's families on the collector's ``/metrics`` (:meth:`LinkHealth.collect`)."""
DROP_REASONS = ("backlog_full", "too_old", "refused", "shutdown")
OK, DOWN, REFUSING = "ok", "down", "refusing"


@dataclass(frozen=True, slots=True)
class Counts:
    """A copy of the sink's sample counters."""

    sent: int
    rejected: int  # refused by the receiver (4xx); also counted in dropped["refused"]
    dropped: dict[str, int]  # by reason, DROP_REASONS
    late: int  # written 1 ms after their series' last sample instead of at their own time
    retries: int
    pending: int
    state: str
    last_success: float  # Unix seconds of the last accepted write; 0 before the first


class LinkHealth:
    """Counters and state of one remote-write link; thread-safe.

    Args:
        url: the receiver (named in the log).
        pending: ``() -> samples waiting in the backlog``.
        summary_s: seconds between two summaries while the link is not ok.
        clock: monotonic seconds.
        wall: Unix seconds (the last accepted write's time).
    """

    def __init__(
        self,
        url: str,
        pending: Callable[[], int],
        summary_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self._pending = pending
        self.summary_s = summary_s
        self._clock = clock
        self._wall = wall
        self._last_success = 0.0
        self._lock = threading.Lock()
        self._sent = self._rejected = self._late = self._retries = 0
        self._dropped = dict.fromkeys(DROP_REASONS, 0)
        self.state = OK
        self._since = self._last_summary = clock()
        self._period: dict[str, int] = {}  # counts since the state changed or the last summary
        self._logged_drops: set[str] = set()

    # -- events --------------------------------------------------------------------------

    def delivered(self, samples: int) -> None:
        """A write was accepted (2xx)."""
        with self._lock:
            self._sent += samples
            self._last_success = self._wall()
            if self.state != OK:
                logger.info(
                    "remote_write %s: writes accepted again after %.0f s %s (%s)",
                    self.url,
                    self._clock() - self._since,
                    self.state,
                    self._describe(),
                )
                self._enter(OK)

    def failed(self, detail: str, retry: bool) -> None:
        """A write failed retryably (``retry``: it will be sent again after a backoff)."""
        with self._lock:
            self._retries += retry
            self._count("failed requests", 1)
            if self.state != DOWN:
                logger.warning(
                    "remote_write %s: receiver unavailable (%s); writes wait in the backlog "
                    "and are retried; a summary follows every %.0f s while this lasts",
                    self.url,
                    detail,
                    self.summary_s,
                )
                self._enter(DOWN)
            self._maybe_summarize(detail)

    def refused(self, samples: int, detail: str) -> None:
        """The receiver refused a write (4xx): its samples are dropped."""
        with self._lock:
            self._rejected += samples
            self._dropped["refused"] += samples
            self._count("refused requests", 1)
            self._count("refused samples", samples)
            if self.state != REFUSING:
                logger.warning(
                    "remote_write %s: write of %d samples refused (%s); refused samples are "
                    "dropped (counted); a summary follows every %.0f s while this lasts",
                    self.url,
                    samples,
                    detail,
                    self.summary_s,
                )
                self._enter(REFUSING)
                self._logged_drops.add("refused")
            self._maybe_summarize(detail)

    def dropped(self, reason: str, samples: int, why: str) -> None:
        """``samples`` were given up unsent for ``reason`` (one of :data:`DROP_REASONS`)."""
        with self._lock:
            self._dropped[reason] += samples
            self._count(f"{reason} drops", samples)
            if reason not in self._logged_drops:
                self._logged_drops.add(reason)
                logger.warning("remote_write %s: %d samples dropped: %s", self.url, samples, why)

    def late(self, samples: int) -> None:
        """``samples`` came before their series' last sample and were written just after it."""
        with self._lock:
            self._late += samples

    # -- readers -------------------------------------------------------------------------

    def counts(self) -> Counts:
        """A consistent copy of the counters."""
        pending = self._pending()
        with self._lock:
            return Counts(
                self._sent,
                self._rejected,
                dict(self._dropped),
                self._late,
                self._retries,
                pending,
                self.state,
                self._last_success,
            )

    def problem(self) -> str | None:
        """Why the link is degraded (for ``/healthz``), or None when it is ok."""
        with self._lock:
            if self.state == OK:
                return None
            return f"remote_write {self.url}: {self.state} for {self._clock() - self._since:.0f} s"

    def describe(self) -> list[Metric]:
        """The families :meth:`collect` builds, without samples."""
        return describe(_DECLARED)

    def collect(self) -> Iterator[Metric]:
        """The link's families, built from the counters now."""
        c = self.counts()
        yield _SENT.build(c.sent)
        yield _REJECTED.build(c.rejected)
        dropped = _DROPPED.build()
        for reason, n in c.dropped.items():
            dropped.add_metric([reason], n)
        yield dropped
        yield _LATE.build(c.late)
        yield _RETRIES.build(c.retries)
        yield _PENDING.build(c.pending)
        yield _DEGRADED.build(c.state != OK)
        yield _LAST_SUCCESS.build(c.last_success)

    # -- state ---------------------------------------------------------------------------

    def _enter(self, state: str) -> None:
        self.state = state
        self._since = self._last_summary = self._clock()
        self._period = {}
        self._logged_drops = set()

    def _count(self, what: str, n: int) -> None:
        self._period[what] = self._period.get(what, 0) + n

    def _maybe_summarize(self, detail: str) -> None:
        now = self._clock()
        if now - self._last_summary < self.summary_s:
            return
        logger.warning(
            "remote_write %s: %s for %.0f s; in the last %.0f s: %s; last: %s",
            self.url,
            self.state,
            now - self._since,
            now - self._last_summary,
            self._describe(),
            detail,
        )
        self._last_summary = now
        self._period = {}

    def _describe(self) -> str:
        parts = [f"{n} {what}" for what, n in self._period.items()]
        return ", ".join([*parts, f"{self._pending()} samples pending"])
