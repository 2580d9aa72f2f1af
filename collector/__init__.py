"""rltel's collector: an OTLP/gRPC receiver fanning out to Prometheus, W&B, SwanLab, TensorBoard.

Run it with ``rltel collector --config collector.yaml`` or ``python -m collector``. It never
imports torch.
"""

from collector.config import CollectorConfig, default_config, load
from collector.merge import RolloutMerger
from collector.pipeline import Pipeline
from collector.server import CollectorServer
from telemetry.otlp.decode import Decoder, DecodeResult

__all__ = [
    "CollectorConfig",
    "CollectorServer",
    "DecodeResult",
    "Decoder",
    "Pipeline",
    "RolloutMerger",
    "default_config",
    "load",
]
