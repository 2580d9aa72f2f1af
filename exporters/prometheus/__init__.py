"""The Prometheus sink: OTel -> Prometheus naming and an exposition HTTP endpoint."""

from exporters.prometheus.naming import MetricKey, metric_name, resolve_names

__all__ = ["MetricKey", "metric_name", "resolve_names"]
