"""The Weights & Biases sink; ``wandb`` itself is imported only when a sink is built."""

import dataclasses

from exporters.factory import BuildContext, SinkFactory
from exporters.wandb.sink import TABLE_KEY, WandbSink, step_metric
from telemetry.config import StatsLoggerConfig


def _create(config: StatsLoggerConfig, context: BuildContext) -> WandbSink:
    if context.run_name_suffix is not None:
        wandb = dataclasses.replace(config.wandb, id_suffix=context.run_name_suffix)
        config = dataclasses.replace(config, wandb=wandb)
    return WandbSink(config, context.experiment)


FACTORY = SinkFactory(
    "wandb", "mode", enabled=lambda section: section.mode != "disabled", create=_create
)

__all__ = ["FACTORY", "TABLE_KEY", "WandbSink", "step_metric"]
