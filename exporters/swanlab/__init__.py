"""The SwanLab sinks; ``swanlab`` itself is imported only when a sink is built."""

from exporters.factory import BuildContext, SinkFactory
from exporters.swanlab.process import SwanlabProcessSink
from exporters.swanlab.sink import SwanlabSink
from telemetry.config import StatsLoggerConfig


def _create(config: StatsLoggerConfig, context: BuildContext) -> SwanlabSink | SwanlabProcessSink:
    sink = SwanlabProcessSink if context.own_process else SwanlabSink
    return sink(config, context.experiment)


FACTORY = SinkFactory(
    "swanlab", "mode", enabled=lambda section: section.mode != "disabled", create=_create
)

__all__ = ["FACTORY", "SwanlabProcessSink", "SwanlabSink"]
