"""A SwanlabSink in a child process: how one collector process serves several SwanLab runs.

SwanLab keeps its run in module globals (one run per process). The collector builds one
``SwanlabProcessSink`` per ``<experiment>_<trial>`` run (:class:`exporters.child_sink.ChildSink`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporters.child_sink import ChildSink
from telemetry.config import StatsLoggerConfig


class SwanlabProcessSink(ChildSink):
    """Runs a :class:`~exporters.swanlab.sink.SwanlabSink` for one run in its own spawned
    process (see :class:`~exporters.child_sink.ChildSink` for the arguments and errors)."""

    def __init__(
        self,
        config: StatsLoggerConfig,
        experiment: Mapping[str, Any] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        super().__init__("swanlab", _build, config, experiment, start_timeout_s)


def _build(config: StatsLoggerConfig, experiment: Mapping[str, Any] | None) -> Any:
    """The child's sink (imported there: the parent never imports swanlab)."""
    from exporters.swanlab.sink import SwanlabSink

    return SwanlabSink(config, experiment)
