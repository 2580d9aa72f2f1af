"""The Weights & Biases sink; ``wandb`` itself is imported only when a sink is built."""

from exporters.wandb.sink import TABLE_KEY, WandbSink, step_metric

__all__ = ["TABLE_KEY", "WandbSink", "step_metric"]
