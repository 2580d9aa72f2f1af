"""The collector's own metrics, served next to the sinks' metrics on ``/metrics``.

A prometheus_client custom collector: families are built fresh on every scrape from the
server's request counters, :meth:`collector.pipeline.Pipeline.stats` and, where the
collector built its runs' sinks, :class:`collector.sinks.RunSinkFactory` (each run's
directory, each sink that failed to start). The standard ``process_*`` families follow
(prometheus_client's process collector): ``process_start_time_seconds`` tells a counter
reset by a restart from a scrape gap. On ``/metrics`` the trace and logs services' counters
(:data:`SIGNALS`) come last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client import ProcessCollector
from prometheus_client.metrics_core import Metric

from collector.pipeline import PipelineStats
from collector.sinks import RunSinkFactory
from exporters.prometheus.families import Family, describe
from exporters.prometheus.queue_metrics import SINK_QUEUES, sink_families

if TYPE_CHECKING:
    from collector.signal_service import SignalService

PREFIX = "rltel_collector_"

# what describe() names and collect() builds; the sink queues' families are the
# StatsLogger's too (exporters.prometheus.queue_metrics), the process_* ones prometheus_client's
DECLARED: tuple[Family, ...] = (
    Family(f"{PREFIX}requests", "counter", "OTLP Export calls by gRPC status", ("code",)),
    Family(f"{PREFIX}request_bytes", "counter", "bytes of Export requests received"),
    Family(f"{PREFIX}points_received", "counter", "data points"),
    Family(f"{PREFIX}points_rejected", "counter", "data points that could not be mapped"),
    Family(f"{PREFIX}snapshots", "counter", "snapshots decoded"),
    Family(f"{PREFIX}refused_overloaded", "counter", "requests refused: memory limit"),
    Family(
        f"{PREFIX}requests_refused",
        "counter",
        "requests refused with nothing kept, by reason (retryable: memory, queue_full, "
        "heavy; not: too_large; expired)",
        ("reason",),
    ),
    Family(
        f"{PREFIX}points_over_limit",
        "counter",
        "data points rejected by a name/label limit, by limit",
        ("limit",),
    ),
    Family(f"{PREFIX}runs_refused", "counter", "snapshots of runs past max_runs"),
    Family(f"{PREFIX}runs", "gauge", "runs with their own step-based sinks"),
    Family(f"{PREFIX}pending_bytes", "gauge", "bytes held: requests in flight, queued data"),
    Family(f"{PREFIX}decoder_series", "gauge", "series with temporality state"),
    *SINK_QUEUES,
    Family(
        f"{PREFIX}sink_start_failed",
        "gauge",
        "1 per sink that failed to start (the run has the others); error: why",
        ("run", "sink", "error"),
    ),
    Family(
        f"{PREFIX}run_info",
        "gauge",
        "1 per run: its directory on the collector's host",
        ("run", "dir"),
    ),
    Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes."),
    Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes."),
    Family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
    ),
    Family("process_cpu_seconds", "counter", "Total user and system CPU time spent in seconds."),
    Family("process_open_fds", "gauge", "Number of open file descriptors."),
    Family("process_max_fds", "gauge", "Maximum number of open file descriptors."),
)
_OURS = {family.name.removeprefix(PREFIX): family for family in DECLARED}
SIGNAL_PREFIX = f"{PREFIX}signal_"
_REQUESTS, _ACCEPTED, _REFUSED, _ERRORS = SIGNALS = (
    Family(
        f"{SIGNAL_PREFIX}requests",
        "counter",
        "trace and logs Export calls by gRPC status",
        ("signal", "code"),
    ),
    Family(
        f"{SIGNAL_PREFIX}items_accepted",
        "counter",
        "spans (traces) and log records (logs) handed to the consumers",
        ("signal",),
    ),
    Family(
        f"{SIGNAL_PREFIX}items_refused",
        "counter",
        "spans and log records of requests refused after parsing (nothing kept)",
        ("signal",),
    ),
    Family(f"{SIGNAL_PREFIX}consumer_errors", "counter", "consumer calls that raised", ("signal",)),
)
"""The trace and logs services' families (:mod:`collector.signal_service`), with ``signals``."""


class SelfMetrics:
    """Yields the collector's families; register it on the Prometheus sink's registry.

    Args:
        requests: ``() -> {grpc status code name: Export calls}``.
        request_bytes: ``() -> bytes of Export requests received``.
        pipeline_stats: ``() -> PipelineStats``.
        run_sinks: the factory of the runs' sinks (None: a pipeline built elsewhere).
        signals: the trace and logs services whose counters to add (:data:`SIGNALS`);
            none for the remote-write sink's copy.
    """

    def __init__(
        self,
        requests: Callable[[], Mapping[str, int]],
        request_bytes: Callable[[], int],
        pipeline_stats: Callable[[], PipelineStats],
        run_sinks: RunSinkFactory | None = None,
        signals: Sequence[SignalService] = (),
    ) -> None:
        self._requests = requests
        self._request_bytes = request_bytes
        self._stats = pipeline_stats
        self._run_sinks = run_sinks
        self._process = ProcessCollector(registry=None)
        self._signals = list(signals)

    def describe(self) -> list[Metric]:
        """The families of :data:`DECLARED` (and :data:`SIGNALS`), without samples."""
        return describe(DECLARED + (SIGNALS if self._signals else ()))

    def collect(self) -> Iterator[Metric]:
        requests = _OURS["requests"].build()
        for code, count in sorted(self._requests().items()):
            requests.add_metric([code], count)
        yield requests
        yield _OURS["request_bytes"].build(self._request_bytes())
        stats = self._stats()
        counters = {
            "points_received": stats.points_accepted + stats.points_rejected,
            "points_rejected": stats.points_rejected,
            "snapshots": stats.snapshots,
            "refused_overloaded": stats.refused_overloaded,
            "runs_refused": stats.runs_refused,
        }
        for name, value in counters.items():
            yield _OURS[name].build(value)
        refused = _OURS["requests_refused"].build()
        for reason, count in sorted(stats.refused.items()):
            refused.add_metric([reason], count)
        yield refused
        over = _OURS["points_over_limit"].build()
        for limit, count in sorted(stats.over_limit.items()):
            over.add_metric([limit], count)
        yield over
        gauges = {
            "runs": stats.runs,
            "pending_bytes": stats.pending_bytes,
            "decoder_series": stats.decoder_series,
        }
        for name, value in gauges.items():
            yield _OURS[name].build(value)
        yield from sink_families(stats.sinks)
        if self._run_sinks is not None:
            yield from _run_families(self._run_sinks)
        yield from self._process.collect()
        if self._signals:
            yield from _signal_families(self._signals)


def _run_families(run_sinks: RunSinkFactory) -> Iterator[Metric]:
    info = _OURS["run_info"].build()
    for run, path in sorted(run_sinks.run_dirs().items()):
        info.add_metric([run, path], 1.0)
    failed = _OURS["sink_start_failed"].build()
    for (run, sink), error in sorted(run_sinks.failures().items()):
        failed.add_metric([run, sink, error], 1.0)
    yield from (info, failed)


def _signal_families(services: Sequence[SignalService]) -> Iterator[Metric]:
    requests, accepted = _REQUESTS.build(), _ACCEPTED.build()
    refused, errors = _REFUSED.build(), _ERRORS.build()
    for service in services:
        counts, name = service.counts(), service.kind.name
        for code, count in sorted(counts.requests.items()):
            requests.add_metric([name, code], count)
        accepted.add_metric([name], counts.accepted)
        refused.add_metric([name], counts.refused)
        errors.add_metric([name], counts.consumer_errors)
    yield from (requests, accepted, refused, errors)
