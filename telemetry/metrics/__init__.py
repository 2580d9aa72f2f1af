"""Producers of the seeds' metrics: RL diagnostics, throughput and FLOPs, MoE balance, Twinkle."""

from telemetry.metrics.advantages import record_advantage_fractions
from telemetry.metrics.flops import (
    estimate_batch_flops,
    get_flops_estimator,
    register_flops_estimator,
)
from telemetry.metrics.moe import MoEBalance
from telemetry.metrics.moe_hooks import RouterHooks, hook_router, hook_transformers_moe, wrap_router
from telemetry.metrics.staleness import record_version_stats
from telemetry.metrics.train_infer import record_train_infer
from telemetry.metrics.train_perf import TrainPerf
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
    "MoEBalance",
    "RouterHooks",
    "TrainMetric",
    "TrainPerf",
    "estimate_batch_flops",
    "get_flops_estimator",
    "hook_router",
    "hook_transformers_moe",
    "record_advantage_fractions",
    "record_train_infer",
    "record_version_stats",
    "register_flops_estimator",
    "wrap_router",
]
