"""AReaL's evaluator by its documented path; the modules are :mod:`telemetry.metrics.evaluator`
and :mod:`telemetry.metrics.eval_schedule`."""

from telemetry.metrics.eval_schedule import AdaptiveFrequencyControl, FrequencyControl
from telemetry.metrics.evaluator import Evaluator, EvaluatorConfig

__all__ = [
    "AdaptiveFrequencyControl",
    "Evaluator",
    "EvaluatorConfig",
    "FrequencyControl",
]
