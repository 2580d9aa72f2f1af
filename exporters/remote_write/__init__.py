"""The Prometheus remote-write sink: the collector's series pushed to a remote-write store."""

from collector.config import RemoteWriteConfig
from exporters.remote_write.sink import RemoteWriteSink

__all__ = ["RemoteWriteConfig", "RemoteWriteSink"]
