"""The SwanLab sinks; ``swanlab`` itself is imported only when a sink is built."""

from exporters.swanlab.process import SwanlabProcessSink
from exporters.swanlab.sink import SwanlabSink

__all__ = ["SwanlabProcessSink", "SwanlabSink"]
