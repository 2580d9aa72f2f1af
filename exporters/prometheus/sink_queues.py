"""Every sink queue's counters as one set of Prometheus families, wherever the queues run.

``rltel_collector_sink_{exported,failed,dropped,retried,timed_out}_total``,
``rltel_collector_sink_queue_depth``, ``rltel_collector_sink_latency_seconds`` and
``rltel_collector_sink_degraded``, labelled ``run`` (:func:`telemetry.model.run.run_name`;
``shared`` for the collector's shared sinks) and ``sink``: the names the dashboards and
alerts read. The collector serves them for every run; an in-process StatsLogger's
Prometheus endpoint serves them for its own run (:class:`FanOutCollector`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporters.fanout import FanOut, SinkStats
from exporters.prometheus.naming import Kind

__all__ = ["SINK_FAMILIES", "FanOutCollector", "sink_families"]

PREFIX = "rltel_collector_sink_"
COUNTERS = ("exported", "failed", "dropped", "retried", "timed_out")
GAUGES = {  # family -> (SinkStats field, help)
    "queue_depth": ("queue_depth", "snapshots queued"),
    "latency_seconds": ("last_latency_s", "duration of the last successful export"),
    "degraded": ("degraded", "1 while the last export failed or a stalled one still runs"),
}
SINK_FAMILIES: dict[str, Kind] = {
    **{f"{PREFIX}{name}": "counter" for name in COUNTERS},
    **{f"{PREFIX}{name}": "gauge" for name in GAUGES},
}
"""Family name -> kind, to reserve on the Prometheus sink that serves them."""


def sink_families(stats: Mapping[tuple[str, str], SinkStats]) -> Iterator[Metric]:
    """The families of ``(run, sink) -> stats``."""
    labels = ["run", "sink"]
    counters = {
        name: CounterMetricFamily(f"{PREFIX}{name}", f"sink exports {name}", labels=labels)
        for name in COUNTERS
    }
    gauges = {
        name: GaugeMetricFamily(f"{PREFIX}{name}", text, labels=labels)
        for name, (_, text) in GAUGES.items()
    }
    for (run, sink), entry in sorted(stats.items()):
        for name, family in counters.items():
            family.add_metric([run, sink], getattr(entry, name))
        for name, (field, _) in GAUGES.items():
            value = getattr(entry, field)
            if value is not None:
                gauges[name].add_metric([run, sink], float(value))
    yield from counters.values()
    yield from gauges.values()


class FanOutCollector:
    """A :class:`FanOut`'s sink families for one run.

    Serve them with ``prometheus_sink.register(FanOutCollector(fanout, run), SINK_FAMILIES)``.
    """

    def __init__(self, fanout: FanOut, run: str) -> None:
        self._fanout = fanout
        self._run = run

    def collect(self) -> Iterator[Metric]:
        stats = self._fanout.stats()
        yield from sink_families({(self._run, name): entry for name, entry in stats.items()})
