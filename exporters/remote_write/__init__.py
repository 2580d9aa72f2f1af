"""The Prometheus remote-write sink: the collector's series pushed to a remote-write store."""

from exporters.factory import SinkFactory
from exporters.remote_write.config import RemoteWriteConfig
from exporters.remote_write.sink import RemoteWriteSink

FACTORY = SinkFactory(
    "remote_write",
    "enabled",
    enabled=lambda section: section.enabled,
    create=lambda config, context: RemoteWriteSink(config.remote_write),
    shared=True,
)

__all__ = ["FACTORY", "RemoteWriteConfig", "RemoteWriteSink"]
