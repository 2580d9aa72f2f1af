"""The Prometheus sink: OTel -> Prometheus naming and an exposition HTTP endpoint."""

from exporters.factory import SinkFactory
from exporters.prometheus.naming import MetricKey, metric_name, resolve_names
from exporters.prometheus.queue_metrics import (
    SINK_QUEUES,
    QueueMetrics,
    sink_families,
)
from exporters.prometheus.sink import SELF_METRICS, PrometheusSink

FACTORY = SinkFactory(
    "prometheus",
    "enabled",
    enabled=lambda section: section.enabled,
    create=lambda config, context: PrometheusSink(
        config.prometheus, key=f"{context.root}.prometheus"
    ),
    shared=True,
)

__all__ = [
    "FACTORY",
    "SELF_METRICS",
    "SINK_QUEUES",
    "MetricKey",
    "PrometheusSink",
    "QueueMetrics",
    "metric_name",
    "resolve_names",
    "sink_families",
]
