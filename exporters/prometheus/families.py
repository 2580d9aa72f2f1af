"""A collector's Prometheus families declared once: what its ``describe()`` names, what its
``collect()`` builds, and what a sink reserves for them.

prometheus_client's protocol: a custom collector's ``collect()`` yields its families with
their samples, ``describe()`` the same families without samples (name, help, type). Each
collector served beside the snapshot metrics keeps one tuple of :class:`Family` in its
module; ``collect()`` builds from it (:meth:`Family.build`) and ``describe()`` returns it
(:func:`describe`), so the two cannot disagree. :meth:`PrometheusSink.register` and
:meth:`RemoteWriteSink.add_source` read the names and kinds back from ``describe()``
(:func:`declared`) and keep them out of the snapshot metrics' names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporters.prometheus.naming import Kind

__all__ = ["Family", "declared", "describe"]

_BUILDERS = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}


@dataclass(frozen=True, slots=True)
class Family:
    """One family a collector serves: its name (a counter's without ``_total``), kind, help
    and label names."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()

    def build(self, value: float | None = None) -> Metric:
        """This family with no samples (add them when labelled), or its one ``value``."""
        builder = _BUILDERS[self.kind]
        if self.labels:
            return builder(self.name, self.help, labels=list(self.labels))
        return builder(self.name, self.help, value=value)


def describe(families: Iterable[Family]) -> list[Metric]:
    """``families`` without samples: what a collector's ``describe()`` returns."""
    return [family.build() for family in families]


def declared(collector: Collector) -> dict[str, Kind]:
    """Family name -> kind of every family ``collector.describe()`` names.

    Raises:
        ValueError: ``collector`` describes nothing, or a family of another type than
            counter, gauge or histogram.
    """
    out: dict[str, Kind] = {}
    for family in collector.describe():
        if family.type not in ("counter", "gauge", "histogram"):
            raise ValueError(f"family {family.name}: type {family.type} cannot be reserved")
        out[family.name] = family.type
    if not out:
        raise ValueError(f"{type(collector).__name__}.describe() names no family")
    return out
