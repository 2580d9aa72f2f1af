"""The demo's spans: every rank and rollout worker records its phases with ``perf_tracer``.

Rank 0's and each rollout worker's tracer is their StatsLogger's (the ``tracing`` section
:data:`TRACING` turns on): embedded, AReaL's per-rank Chrome trace file under
``<run dir>/traces``; over OTLP, the StatsLogger's OTLP sink sends the spans to the
collector, which merges them into ``<run dir>/trace.json``. The other ranks have no
StatsLogger (only rank 0 commits), so :func:`rank_tracing` configures theirs the same way:
the Chrome trace file embedded, the SDK's OTLP/gRPC span exporter to the collector over
OTLP. ``rltel report`` draws either as ``timeline.png``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from telemetry import perf_tracer
from telemetry.config import TracingConfig
from telemetry.model import names
from telemetry.model.run import RunKey

__all__ = ["TRACING", "rank_tracing"]

TRACING = {"enabled": True}
"""The StatsLogger's ``tracing`` section in the demo."""


def rank_tracing(rank: int, run: RunKey, run_dir: Path, endpoint: str | None) -> Callable[[], None]:
    """Configure the tracer of a rank without a StatsLogger (not rank 0); returns what
    exports its last spans and resets it (call it before the process group ends)."""
    if rank == 0:
        return lambda: None
    exporter = None
    if endpoint is not None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    perf_tracer.configure(
        TracingConfig(**TRACING),
        rank=rank,
        role="trainer",
        exporter=exporter,
        output_dir=run_dir / "traces",
        resource=((names.EXPERIMENT, run[0]), (names.TRIAL, run[1])),
    )

    def stop() -> None:
        perf_tracer.save(force=True)
        perf_tracer.reset()

    return stop
