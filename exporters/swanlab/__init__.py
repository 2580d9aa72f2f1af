"""The SwanLab sink; ``swanlab`` itself is imported only when a sink is built."""

from exporters.swanlab.sink import SwanlabSink

__all__ = ["SwanlabSink"]
