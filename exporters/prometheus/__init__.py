"""The Prometheus sink: OTel -> Prometheus naming and an exposition HTTP endpoint."""

from exporters.prometheus.naming import MetricKey, metric_name, resolve_names
from exporters.prometheus.sink import (
    FANOUT_METRICS,
    SELF_METRICS,
    FanOutCollector,
    PrometheusSink,
)

__all__ = [
    "FANOUT_METRICS",
    "SELF_METRICS",
    "FanOutCollector",
    "MetricKey",
    "PrometheusSink",
    "metric_name",
    "resolve_names",
]
