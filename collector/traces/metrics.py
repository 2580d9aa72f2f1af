"""The trace merge's own counters on the collector's ``/metrics`` (:data:`FAMILIES`), built
from :meth:`collector.traces.TraceMerge.stats` on every scrape.

Per run (``run`` label, ``<experiment>_<trial>``): spans written to its file, written
without their root (``orphaned``: the root never came within ``hold_s``), written into a
later part than their step's (``late``), lost to a failed write (``failed``), waiting for
their root now (``pending``), parts finished by rotation. Over all runs: spans received and
rejected (unreadable, or a run without a timeline). Forwarding: requests by ``outcome``
(``sent``, ``dropped``: the queue was full or closing, ``failed``: refused for good or out
of retries, ``retried``: attempts repeated) and requests queued now.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from collector.traces.consumer import TraceStats

__all__ = ["FAMILIES", "TraceMetrics"]

PREFIX = "rltel_collector_trace_"
FAMILIES: dict[str, str] = {
    f"{PREFIX}spans_received": "counter",
    f"{PREFIX}spans_rejected": "counter",
    f"{PREFIX}spans_written": "counter",
    f"{PREFIX}spans_orphaned": "counter",
    f"{PREFIX}spans_late": "counter",
    f"{PREFIX}spans_failed": "counter",
    f"{PREFIX}spans_pending": "gauge",
    f"{PREFIX}parts_rotated": "counter",
    f"{PREFIX}forward_requests": "counter",
    f"{PREFIX}forward_queued": "gauge",
}
"""The trace merge's families (reserved in the Prometheus sink when registered)."""

_PER_RUN = (
    ("spans_written", "spans written to the run's trace file", "spans"),
    ("spans_orphaned", "spans written without their trace's root (waited past hold_s)", "orphans"),
    ("spans_late", "spans written into a later part than their step's", "late"),
    ("spans_failed", "spans lost to a failed write of the run's trace file", "failed"),
    ("parts_rotated", "parts of the run's trace file finished by rotation", "parts"),
)


class _Stats(Protocol):
    def stats(self) -> TraceStats: ...


class TraceMetrics:
    """A prometheus_client collector of one :class:`~collector.traces.TraceMerge`'s stats."""

    def __init__(self, merge: _Stats) -> None:
        self.merge = merge

    def collect(self) -> Iterator[Metric]:
        """The families of :data:`FAMILIES`."""
        stats = self.merge.stats()
        yield _counter("spans_received", "spans received in accepted trace requests", stats.spans)
        yield _counter(
            "spans_rejected", "spans not kept (unreadable, or no run file)", stats.rejected
        )
        for name, text, field in _PER_RUN:
            family = CounterMetricFamily(f"{PREFIX}{name}", text, labels=("run",))
            for run, timeline in sorted(stats.runs.items()):
                family.add_metric((run,), getattr(timeline, field))
            yield family
        pending = GaugeMetricFamily(
            f"{PREFIX}spans_pending", "spans waiting for their trace's root", labels=("run",)
        )
        for run, timeline in sorted(stats.runs.items()):
            pending.add_metric((run,), timeline.pending)
        yield pending
        forward = stats.forward
        if forward is None:
            return
        requests = CounterMetricFamily(
            f"{PREFIX}forward_requests",
            "trace requests forwarded, by outcome",
            labels=("outcome",),
        )
        for outcome in ("sent", "dropped", "failed", "retried"):
            requests.add_metric((outcome,), getattr(forward, outcome))
        yield requests
        yield GaugeMetricFamily(
            f"{PREFIX}forward_queued", "trace requests waiting to be forwarded", forward.queued
        )


def _counter(name: str, text: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}{name}", text, value=value)
