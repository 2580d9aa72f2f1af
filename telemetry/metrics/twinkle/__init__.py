"""Twinkle's metric classes on rltel's coalesced DP reduction and tracker export."""

from telemetry.metrics.twinkle.base import Metric
from telemetry.metrics.twinkle.completion import CompletionRewardMetric
from telemetry.metrics.twinkle.dpo import DPOMetric
from telemetry.metrics.twinkle.embedding import EmbeddingMetric
from telemetry.metrics.twinkle.grpo import CISPOMetric, GRPOMetric, GSPOMetric
from telemetry.metrics.twinkle.train import Accuracy, LossMetric, TrainMetric

__all__ = [
    "Accuracy",
    "CISPOMetric",
    "CompletionRewardMetric",
    "DPOMetric",
    "EmbeddingMetric",
    "GRPOMetric",
    "GSPOMetric",
    "LossMetric",
    "Metric",
    "TrainMetric",
]
