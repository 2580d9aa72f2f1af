"""The trace merge's own counters on the collector's ``/metrics`` (:class:`TraceMetrics`), built
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

from prometheus_client.metrics_core import Metric

from collector.traces.consumer import TraceStats
from exporters.prometheus.families import Family, describe

__all__ = ["TraceMetrics"]

PREFIX = "rltel_collector_trace_"
_RUN = ("run",)
_PER_RUN = tuple(  # (family, TimelineStats field)
    (Family(f"{PREFIX}{name}", "counter", text, _RUN), field)
    for name, text, field in (
        ("spans_written", "spans written to the run's trace file", "spans"),
        (
            "spans_orphaned",
            "spans written without their trace's root (waited past hold_s)",
            "orphans",
        ),
        ("spans_late", "spans written into a later part than their step's", "late"),
        ("spans_failed", "spans lost to a failed write of the run's trace file", "failed"),
        ("parts_rotated", "parts of the run's trace file finished by rotation", "parts"),
    )
)
_RECEIVED = Family(
    f"{PREFIX}spans_received", "counter", "spans received in accepted trace requests"
)
_REJECTED = Family(
    f"{PREFIX}spans_rejected", "counter", "spans not kept (unreadable, or no run file)"
)
_PENDING = Family(f"{PREFIX}spans_pending", "gauge", "spans waiting for their trace's root", _RUN)
_FORWARD_REQUESTS = Family(
    f"{PREFIX}forward_requests", "counter", "trace requests forwarded, by outcome", ("outcome",)
)
_FORWARD_QUEUED = Family(
    f"{PREFIX}forward_queued", "gauge", "trace requests waiting to be forwarded"
)
_DECLARED = (
    _RECEIVED,
    _REJECTED,
    *(family for family, _ in _PER_RUN),
    _PENDING,
    _FORWARD_REQUESTS,
    _FORWARD_QUEUED,
)
"""The trace merge's families; the forward ones only with a forward endpoint."""


class _Stats(Protocol):
    def stats(self) -> TraceStats: ...


class TraceMetrics:
    """A prometheus_client collector of one :class:`~collector.traces.TraceMerge`'s stats."""

    def __init__(self, merge: _Stats) -> None:
        self.merge = merge

    def describe(self) -> list[Metric]:
        """Every family :meth:`collect` may build (the forward ones with an endpoint)."""
        return describe(_DECLARED)

    def collect(self) -> Iterator[Metric]:
        """The merge's families now."""
        stats = self.merge.stats()
        yield _RECEIVED.build(stats.spans)
        yield _REJECTED.build(stats.rejected)
        for declared, field in _PER_RUN:
            family = declared.build()
            for run, timeline in sorted(stats.runs.items()):
                family.add_metric((run,), getattr(timeline, field))
            yield family
        pending = _PENDING.build()
        for run, timeline in sorted(stats.runs.items()):
            pending.add_metric((run,), timeline.pending)
        yield pending
        forward = stats.forward
        if forward is None:
            return
        requests = _FORWARD_REQUESTS.build()
        for outcome in ("sent", "dropped", "failed", "retried"):
            requests.add_metric((outcome,), getattr(forward, outcome))
        yield requests
        yield _FORWARD_QUEUED.build(forward.queued)
