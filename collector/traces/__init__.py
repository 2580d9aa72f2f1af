"""Spans into the collector's runs: one merged Chrome trace event file per run
(``<run dir>/trace.json``, rotated every ``traces.rotate_steps`` steps), span duration
histograms per phase and role in the run's metrics, and forwarding to an OTLP trace endpoint.

:class:`TraceMerge` is the trace service's consumer (:func:`collector.deliver.trace_merge`
builds the collector's own); see :mod:`collector.traces.consumer`.
"""

from collector.traces.chrome_file import CURRENT, ChromeTraceFile, part_name
from collector.traces.consumer import TraceMerge, TraceStats
from collector.traces.durations import METRIC
from collector.traces.forward import TraceForwarder

__all__ = [
    "CURRENT",
    "METRIC",
    "ChromeTraceFile",
    "TraceForwarder",
    "TraceMerge",
    "TraceStats",
    "part_name",
]
