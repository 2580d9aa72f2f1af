"""Every sink queue's counters as one set of Prometheus families, wherever the queues run.

``rltel_collector_sink_{exported,failed,dropped,retried,timed_out}_total``,
``rltel_collector_sink_queue_depth``, ``rltel_collector_sink_latency_seconds`` and
``rltel_collector_sink_degraded``, labelled ``run`` (:func:`telemetry.model.run.run_name`;
``shared`` for the collector's shared sinks) and ``sink``: the names the dashboards and
alerts read. The collector serves them for every run; an in-process StatsLogger's
Prometheus endpoint serves them for its own run (:class:`QueueMetrics`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.metrics_core import Metric

from exporters.fanout import FanOut, SinkStats
from exporters.prometheus.families import Family, describe

__all__ = ["SINK_QUEUES", "QueueMetrics", "sink_families"]

PREFIX = "rltel_collector_sink_"
COUNTERS = ("exported", "failed", "dropped", "retried", "timed_out")
GAUGES = {  # family -> (SinkStats field, help)
    "queue_depth": ("queue_depth", "snapshots queued"),
    "latency_seconds": ("last_latency_s", "duration of the last successful export"),
    "degraded": ("degraded", "1 while the last export failed or a stalled one still runs"),
}
_LABELS = ("run", "sink")
SINK_QUEUES: tuple[Family, ...] = (
    *(Family(f"{PREFIX}{name}", "counter", f"sink exports {name}", _LABELS) for name in COUNTERS),
    *(Family(f"{PREFIX}{name}", "gauge", text, _LABELS) for name, (_, text) in GAUGES.items()),
)
"""The families of :func:`sink_families`, one per SinkStats field (:data:`_FIELDS`)."""
_FIELDS = (*COUNTERS, *(field for field, _ in GAUGES.values()))


def sink_families(stats: Mapping[tuple[str, str], SinkStats]) -> Iterator[Metric]:
    """The families of ``(run, sink) -> stats``."""
    families = [family.build() for family in SINK_QUEUES]
    for (run, sink), entry in sorted(stats.items()):
        for declared, family, field in zip(SINK_QUEUES, families, _FIELDS, strict=True):
            value = getattr(entry, field)
            if declared.kind == "counter":
                family.add_metric([run, sink], value)
            elif value is not None:
                family.add_metric([run, sink], float(value))
    yield from families


class QueueMetrics:
    """A :class:`FanOut`'s sink families for one run.

    Serve them with ``prometheus_sink.register(QueueMetrics(fanout, run))``.
    """

    def __init__(self, fanout: FanOut, run: str) -> None:
        self._fanout = fanout
        self._run = run

    def describe(self) -> list[Metric]:
        return describe(SINK_QUEUES)

    def collect(self) -> Iterator[Metric]:
        stats = self._fanout.stats()
        yield from sink_families({(self._run, name): entry for name, entry in stats.items()})
