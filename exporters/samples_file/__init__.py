"""The ``samples.jsonl`` sink: a run's kept rollout samples, beside the sinks of its metrics."""

from exporters.samples_file.sink import SamplesFileSink

__all__ = ["SamplesFileSink"]
