"""rltel's in-process side: recording, DP reduction, Snapshot model, OTLP export.

``import telemetry`` is cheap and torch-free; torch-dependent names load on first use. The
StatsLogger is the application's (``from rltel import StatsLogger``); its old name here
fails with an error that says so.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["ReduceType", "Snapshot", "Stats", "log_sample", "stats_tracker"]

_LAZY = {
    "ReduceType": ("telemetry.record.tracker", "ReduceType"),
    "Snapshot": ("telemetry.model.snapshot", "Snapshot"),
    "Stats": ("telemetry.record.stats", "Stats"),
    "log_sample": ("telemetry.samples", "log_sample"),
    "stats_tracker": ("telemetry.record.stats_tracker", None),
}
# Names that moved out of this package, each with where it went (the package stays below
# the application: nothing here imports it).
_MOVED = {"StatsLogger": "StatsLogger moved to rltel (from rltel import StatsLogger)"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        # ``from telemetry import name`` asks through importlib's ``_handle_fromlist``, and
        # Python replaces an AttributeError there by one that drops the message.
        if sys._getframe(1).f_code.co_name == "_handle_fromlist":
            raise ImportError(
                f"cannot import name {name!r} from 'telemetry': {_MOVED[name]}", name="telemetry"
            )
        raise AttributeError(f"module 'telemetry' has no attribute {name!r}: {_MOVED[name]}")
    if name not in _LAZY:
        raise AttributeError(f"module 'telemetry' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)
