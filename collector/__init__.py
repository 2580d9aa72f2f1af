"""rltel's collector: an OTLP/gRPC receiver fanning out to Prometheus, W&B, SwanLab, TensorBoard.

Run it with ``rltel collector --config collector.yaml`` or ``python -m collector``. It never
imports torch. The names below load on first use: a trainer that reads one collector module
(a sink's config section) loads neither the server nor gRPC.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "CollectorConfig": "collector.config",
    "default_config": "collector.config",
    "load": "collector.config",
    "RolloutMerger": "collector.merge",
    "Pipeline": "collector.pipeline",
    "CollectorServer": "collector.server",
    "Decoder": "telemetry.otlp.decode",
    "DecodeResult": "telemetry.otlp.decode",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'collector' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
