"""The Trackio sink; ``trackio`` itself is imported only when a sink is built."""

from exporters.factory import BuildContext, SinkFactory
from exporters.trackio.sink import TrackioProcessSink, TrackioSink, data_dir
from telemetry.config import StatsLoggerConfig


def _create(config: StatsLoggerConfig, context: BuildContext) -> TrackioSink | TrackioProcessSink:
    sink = TrackioProcessSink if context.own_process else TrackioSink
    return sink(config, context.experiment)


FACTORY = SinkFactory(
    "trackio", "mode", enabled=lambda section: section.mode != "disabled", create=_create
)

__all__ = ["FACTORY", "TrackioProcessSink", "TrackioSink", "data_dir"]
