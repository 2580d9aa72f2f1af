"""The ``samples.jsonl`` sink: a run's kept rollout samples, beside the sinks of its metrics."""

from exporters.factory import BuildContext, SinkFactory
from exporters.samples_file.sink import SamplesFileSink
from telemetry.config import StatsLoggerConfig


def _create(config: StatsLoggerConfig, context: BuildContext) -> SamplesFileSink:
    del context
    return SamplesFileSink(config.run_dir)


FACTORY = SinkFactory(
    "samples",
    "jsonl",
    enabled=lambda section: section.enabled and section.jsonl,
    create=_create,
    companion=True,
)

__all__ = ["FACTORY", "SamplesFileSink"]
