"""rltel's in-process side: recording, DP reduction, Snapshot model, OTLP export.

``import telemetry`` is cheap and torch-free; torch-dependent names load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ReduceType", "Snapshot", "Stats", "StatsLogger", "log_sample", "stats_tracker"]

_LAZY = {
    "ReduceType": ("telemetry.record.tracker", "ReduceType"),
    "Snapshot": ("telemetry.model.snapshot", "Snapshot"),
    "Stats": ("telemetry.record.stats", "Stats"),
    "StatsLogger": ("rltel.logger", "StatsLogger"),
    "log_sample": ("telemetry.samples", "log_sample"),
    "stats_tracker": ("telemetry.record.stats_tracker", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'telemetry' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)
