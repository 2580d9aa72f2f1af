"""The Prometheus sink: OTel -> Prometheus naming and an exposition HTTP endpoint."""

from exporters.prometheus.naming import MetricKey, metric_name, resolve_names
from exporters.prometheus.sink import SELF_METRICS, PrometheusSink

__all__ = ["SELF_METRICS", "MetricKey", "PrometheusSink", "metric_name", "resolve_names"]
