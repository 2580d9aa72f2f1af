"""The telemetry path's own Grafana dashboard: senders' OTLP sinks, the collector, its sinks.

Names come from :mod:`dashboards.catalog`, the collector's self-metrics prefix, the
remote-write sink's families and the families the alert rules read; the training run's
dashboards are in :mod:`dashboards.boards`. The remote-write row reads the sink's own
families on the collector's ``/metrics`` (or on the shared store, where the collector
remote-writes them too).
"""

from __future__ import annotations

from collector.selfmetrics import PREFIX as COLLECTOR_PREFIX
from dashboards import catalog as c
from dashboards.alerts import COLLECTOR_JOB, OVERFLOW_POINTS, POINTS_REJECTED, SINK_DROPPED
from dashboards.panels import Panel, Query, dashboard, row, stat, timeseries
from exporters.remote_write.health import PREFIX as RW


def remote_write() -> list[Panel]:
    """The remote-write row: the link's state, samples by outcome, backlog, retries."""
    rate = "[$__rate_interval]"
    return [
        row("Remote write"),
        stat(
            "Remote write degraded",
            Query(f"max({RW}degraded)"),
            thresholds=(1,),
            colors=("green", "red"),
            description="1 while the sink is degraded (red), 0 once writes go through.",
        ),
        stat("Samples pending (backlog)", Query(f"sum({RW}samples_pending)")),
        stat(
            "Since the last accepted write",
            Query(f"time() - (max({RW}last_success_timestamp_seconds) > 0)"),
            unit="s",
        ),
        stat("Samples dropped (10m)", Query(f"sum(increase({RW}samples_dropped_total[10m]))")),
        timeseries(
            "Remote-write samples/s",
            Query(f"sum(rate({RW}samples_sent_total{rate}))", "sent"),
            Query(f"sum(rate({RW}samples_rejected_total{rate}))", "rejected (4xx)"),
            Query(f"sum by (reason) (rate({RW}samples_dropped_total{rate}))", "dropped {{reason}}"),
            Query(f"sum(rate({RW}samples_late_total{rate}))", "late (moved 1 ms)"),
        ),
        timeseries(
            "Remote-write backlog and retries",
            Query(f"sum by (instance) ({RW}samples_pending)", "pending {{instance}}"),
            Query(
                f"sum by (instance) (rate({RW}retries_total{rate}))",
                "retries/s {{instance}}",
                unit="reqps",
            ),
            description="Samples waiting in the backlog (left axis) and write requests "
            "retried per second (right axis).",
        ),
    ]


def pipeline() -> dict:
    """Collector and OTLP sink health: scrape status, throughput, drops, queues."""
    by_sink = "sum by (run, sink)"
    panels: list[Panel] = [
        row("Collector"),
        stat(
            "Collector up",
            Query(f'min(up{{job="{COLLECTOR_JOB}"}})'),
            thresholds=(1,),
            colors=("red", "green"),
            description="1 (green) while Prometheus scrapes every collector; 0 (red) when "
            "one is down.",
        ),
        stat("Runs", Query(f"sum({COLLECTOR_PREFIX}runs)")),
        stat("Pending bytes", Query(f"sum({COLLECTOR_PREFIX}pending_bytes)"), unit="bytes"),
        stat("Series overflow (10m)", Query(f"sum(increase({OVERFLOW_POINTS}[10m]))")),
        timeseries(
            "Export requests/s by gRPC code",
            Query(
                f"sum by (code) (rate({COLLECTOR_PREFIX}requests_total[$__rate_interval]))",
                "{{code}}",
            ),
        ),
        timeseries(
            "Data points/s",
            Query(
                f"sum(rate({COLLECTOR_PREFIX}points_received_total[$__rate_interval]))", "received"
            ),
            Query(f"sum(rate({POINTS_REJECTED}[$__rate_interval]))", "rejected"),
        ),
        timeseries(
            "Sink queue depth",
            Query(f"{by_sink} ({COLLECTOR_PREFIX}sink_queue_depth)", "{{run}} {{sink}}"),
        ),
        timeseries(
            "Sink drops and failures/s",
            Query(f"{by_sink} (rate({SINK_DROPPED}[$__rate_interval]))", "dropped {{sink}}"),
            Query(
                f"{by_sink} (rate({COLLECTOR_PREFIX}sink_failed_total[$__rate_interval]))",
                "failed {{sink}}",
            ),
        ),
        *remote_write(),
        row("Senders (OTLP sink)"),
        timeseries(
            "Points/s per sender",
            *(
                Query(
                    f"sum by (job, instance) (rate({m.name}[$__rate_interval]))",
                    f"{m.metric.rsplit('_', 1)[1]} {{{{instance}}}}",
                )
                for m in (
                    c.TRANSPORT_EXPORTED,
                    c.TRANSPORT_FAILED,
                    c.TRANSPORT_SPOOLED,
                    c.TRANSPORT_DROPPED,
                )
            ),
        ),
        timeseries(
            "OTLP sink queue and spool",
            Query(f"max by (instance) ({c.TRANSPORT_QUEUE_DEPTH.name})", "queue {{instance}}"),
            Query(
                f"max by (instance) ({c.TRANSPORT_SPOOL_BYTES.name})",
                "spool {{instance}}",
                unit="bytes",
            ),
            description="Requests waiting in each sender's queue (left axis) and the bytes "
            "of its disk spool (right axis).",
        ),
        timeseries(
            "Export latency (mean over the rate window)",
            Query(
                f"sum by (instance) (rate({c.TRANSPORT_LATENCY.stat('sum')}[$__rate_interval]))\n"
                f"/ sum by (instance) (rate({c.TRANSPORT_LATENCY.stat('count')}"
                "[$__rate_interval]))",
                "{{instance}}",
            ),
            unit="s",
            width=24,
        ),
    ]
    return dashboard(
        "rltel-pipeline",
        "rltel / Pipeline",
        panels,
        [],
        "Health of the telemetry path: senders' OTLP sinks, the collector, its sinks.",
    )
