"""The Prometheus sink: OTel -> Prometheus naming and an exposition HTTP endpoint."""

from exporters.prometheus.naming import MetricKey, metric_name, resolve_names
from exporters.prometheus.sink import (
    FANOUT_METRICS,
    SELF_METRICS,
    FanOutCollector,
    PrometheusSink,
)
from exporters.registry import SinkFactory

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
    "FANOUT_METRICS",
    "SELF_METRICS",
    "FanOutCollector",
    "MetricKey",
    "PrometheusSink",
    "metric_name",
    "resolve_names",
]
