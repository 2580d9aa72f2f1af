"""The TensorBoard sink; ``tensorboard`` itself is imported only when a sink is built."""

from exporters.tensorboard.sink import TensorBoardSink

__all__ = ["TensorBoardSink"]
