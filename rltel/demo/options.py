"""What ``rltel demo`` runs: its options, shared by the command line, the ranks, the rollout
workers and the collector it starts."""

from __future__ import annotations

from dataclasses import dataclass

PROMETHEUS_HOST = "127.0.0.1"
DEFAULT_ROLLOUT_WORKERS = 2


@dataclass(frozen=True)
class DemoOptions:
    """What ``rltel demo`` runs.

    ``collector``: start a collector subprocess and send to it over OTLP; ``otlp_endpoint``:
    send to an already running collector. Either way ``rollout_workers`` separate worker
    processes generate the rollouts. Neither: the embedded default (in-process sinks).
    """

    ranks: int = 2
    steps: int = 12
    fileroot: str = "runs"
    prometheus_port: int = 9464
    serve_seconds: float = 0.0
    collector: bool = False
    otlp_endpoint: str | None = None
    rollout_workers: int = DEFAULT_ROLLOUT_WORKERS
    verbose: bool = False

    @property
    def otlp(self) -> bool:
        """Whether metrics go over OTLP (a started or a given collector)."""
        return self.collector or self.otlp_endpoint is not None
