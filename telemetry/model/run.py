"""A run's identity: the experiment and trial its data belongs to, and the one name built
from them."""

from __future__ import annotations

__all__ = ["RunKey", "run_name"]

RunKey = tuple[str, str]
"""``(experiment, trial)``."""


def run_name(experiment: str, trial: str) -> str:
    """``<experiment>_<trial>``: the run's name wherever one name stands for it (the ``run``
    label of its sinks' self-metrics, the W&B group and run id, the SwanLab experiment)."""
    return f"{experiment}_{trial}"
