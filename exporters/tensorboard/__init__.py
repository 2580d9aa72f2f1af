"""The TensorBoard sink; ``tensorboard`` itself is imported only when a sink is built."""

from exporters.factory import SinkFactory
from exporters.tensorboard.sink import TensorBoardSink

FACTORY = SinkFactory(
    "tensorboard",
    "path",
    enabled=lambda section: section.path is not None,
    create=lambda config, context: TensorBoardSink(config),
)

__all__ = ["FACTORY", "TensorBoardSink"]
