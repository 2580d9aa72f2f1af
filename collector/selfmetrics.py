"""The collector's own metrics, served next to the sinks' metrics on ``/metrics``.

A prometheus_client custom collector: families are built fresh on every scrape from the
server's request counters, :meth:`collector.pipeline.Pipeline.stats` and, where the
collector built its runs' sinks, :class:`collector.sinks.RunSinkFactory` (each run's
directory, each sink that failed to start). The standard ``process_*`` families follow
(prometheus_client's process collector): ``process_start_time_seconds`` tells a counter
reset by a restart from a scrape gap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import ProcessCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from collector.pipeline import PipelineStats
from collector.sinks import RunSinkFactory
from exporters.prometheus.sink_queues import SINK_FAMILIES, sink_families

PREFIX = "rltel_collector_"

# family name -> kind, reserved in the Prometheus sink so no snapshot metric takes them; the
# sink queues' families are the StatsLogger's too (exporters.prometheus.sink_queues)
FAMILIES: dict[str, str] = {
    f"{PREFIX}requests": "counter",
    f"{PREFIX}request_bytes": "counter",
    f"{PREFIX}points_received": "counter",
    f"{PREFIX}points_rejected": "counter",
    f"{PREFIX}snapshots": "counter",
    f"{PREFIX}refused_overloaded": "counter",
    f"{PREFIX}requests_refused": "counter",
    f"{PREFIX}points_over_limit": "counter",
    f"{PREFIX}runs_refused": "counter",
    f"{PREFIX}runs": "gauge",
    f"{PREFIX}pending_bytes": "gauge",
    f"{PREFIX}decoder_series": "gauge",
    **SINK_FAMILIES,
    f"{PREFIX}sink_start_failed": "gauge",
    f"{PREFIX}run_info": "gauge",
    "process_virtual_memory_bytes": "gauge",
    "process_resident_memory_bytes": "gauge",
    "process_start_time_seconds": "gauge",
    "process_cpu_seconds": "counter",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
}


class SelfMetrics:
    """Yields the collector's families; register it on the Prometheus sink's registry.

    Args:
        requests: ``() -> {grpc status code name: Export calls}``.
        request_bytes: ``() -> bytes of Export requests received``.
        pipeline_stats: ``() -> PipelineStats``.
        run_sinks: the factory of the runs' sinks (None: a pipeline built elsewhere).
    """

    def __init__(
        self,
        requests: Callable[[], Mapping[str, int]],
        request_bytes: Callable[[], int],
        pipeline_stats: Callable[[], PipelineStats],
        run_sinks: RunSinkFactory | None = None,
    ) -> None:
        self._requests = requests
        self._request_bytes = request_bytes
        self._stats = pipeline_stats
        self._run_sinks = run_sinks
        self._process = ProcessCollector(registry=None)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            f"{PREFIX}requests", "OTLP Export calls by gRPC status", labels=["code"]
        )
        for code, count in sorted(self._requests().items()):
            requests.add_metric([code], count)
        yield requests
        yield CounterMetricFamily(
            f"{PREFIX}request_bytes", "bytes of Export requests received", self._request_bytes()
        )
        stats = self._stats()
        counters = {
            "points_received": (stats.points_accepted + stats.points_rejected, "data points"),
            "points_rejected": (stats.points_rejected, "data points that could not be mapped"),
            "snapshots": (stats.snapshots, "snapshots decoded"),
            "refused_overloaded": (stats.refused_overloaded, "requests refused: memory limit"),
            "runs_refused": (stats.runs_refused, "snapshots of runs past max_runs"),
        }
        for name, (value, help_text) in counters.items():
            yield CounterMetricFamily(PREFIX + name, help_text, value)
        refused = CounterMetricFamily(
            f"{PREFIX}requests_refused",
            "requests refused with nothing kept, by reason (retryable: memory, queue_full, "
            "heavy; not: too_large; expired)",
            labels=["reason"],
        )
        for reason, count in sorted(stats.refused.items()):
            refused.add_metric([reason], count)
        yield refused
        over = CounterMetricFamily(
            f"{PREFIX}points_over_limit",
            "data points rejected by a name/label limit, by limit",
            labels=["limit"],
        )
        for limit, count in sorted(stats.over_limit.items()):
            over.add_metric([limit], count)
        yield over
        gauges = {
            "runs": (stats.runs, "runs with their own step-based sinks"),
            "pending_bytes": (stats.pending_bytes, "bytes held: requests in flight, queued data"),
            "decoder_series": (stats.decoder_series, "series with temporality state"),
        }
        for name, (value, help_text) in gauges.items():
            yield GaugeMetricFamily(PREFIX + name, help_text, value)
        yield from sink_families(stats.sinks)
        if self._run_sinks is not None:
            yield from _run_families(self._run_sinks)
        yield from self._process.collect()


def _run_families(run_sinks: RunSinkFactory) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        f"{PREFIX}run_info",
        "1 per run: its directory on the collector's host",
        labels=["run", "dir"],
    )
    for run, path in sorted(run_sinks.run_dirs().items()):
        info.add_metric([run, path], 1.0)
    failed = GaugeMetricFamily(
        f"{PREFIX}sink_start_failed",
        "1 per sink that failed to start (the run has the others); error: why",
        labels=["run", "sink", "error"],
    )
    for (run, sink), error in sorted(run_sinks.failures().items()):
        failed.add_metric([run, sink, error], 1.0)
    yield from (info, failed)
