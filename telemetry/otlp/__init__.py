"""The OTLP codec (torch-free): Snapshot to OTLP requests and back, used by the
transport and the collector alike."""
