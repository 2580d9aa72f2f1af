"""OTLP delivery: the background transport with its spool, and the gRPC exporter."""
