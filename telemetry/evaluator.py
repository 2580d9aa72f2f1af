"""AReaL's evaluator by its documented path; the module is :mod:`telemetry.metrics.evaluator`."""

from telemetry.metrics.evaluator import (
    AdaptiveFrequencyControl,
    Evaluator,
    EvaluatorConfig,
    FrequencyControl,
)

__all__ = [
    "AdaptiveFrequencyControl",
    "Evaluator",
    "EvaluatorConfig",
    "FrequencyControl",
]
