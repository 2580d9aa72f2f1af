"""The console sink: one compact, width-aware table per step on rank 0."""

from exporters.console.sink import ConsoleSink, format_table
from exporters.factory import SinkFactory

FACTORY = SinkFactory(
    "console",
    "enabled",
    enabled=lambda section: section.enabled,
    create=lambda config, context: ConsoleSink(config.console),
)

__all__ = ["FACTORY", "ConsoleSink", "format_table"]
