"""The StatsLogger's tracer: ``stats_logger.tracing`` configures this process's
``perf_tracer`` (:mod:`telemetry.tracing`) for the logger's role and rank.

Embedded, spans go to the per-rank Chrome trace file under ``tracing.output_dir`` (default
``<run_dir>/traces``); when the logger has an OTLP sink they go to the collector through the
sink's queue and spool (:meth:`exporters.otlp.sink.OtlpSink.span_exporter`): a trainer's rank
other than 0, which logs no stats, then has an OTLP sink for its spans alone. A process whose
tracer is already configured (by AReaL's own ``perf_tracer.configure`` call) keeps it; a
``perf_tracer.configure`` call after the StatsLogger's gets the StatsLogger's tracer.
"""

from __future__ import annotations

import logging
from typing import Any

from telemetry import tracing
from telemetry.config import StatsLoggerConfig

__all__ = ["sends_spans", "start_tracing", "stop_tracing"]

logger = logging.getLogger(__name__)


def _rank(process: str, rank: int) -> int:
    """The trace files' rank: a worker's numeric id, else the process's rank."""
    return int(process) if process.isdigit() else rank


def sends_spans(config: StatsLoggerConfig) -> bool:
    """Whether a process that logs no stats (a trainer's rank other than 0) still needs the
    OTLP sink: to send its spans to the collector."""
    return config.tracing.enabled and bool(config.otlp.endpoint)


def start_tracing(
    config: StatsLoggerConfig,
    role: str,
    rank: int,
    process: str,
    otlp: Any,
    resource: tuple[tuple[str, Any], ...],
) -> bool:
    """Configure the tracer if ``config.tracing.enabled``; True when this call did.

    Args:
        config: the StatsLogger's config.
        role: the logger's role (``trainer``, ``rollout``, ``eval``), the tracer's role.
        rank: this process's rank.
        process: the worker id or the rank (a numeric worker id names its trace file).
        otlp: the logger's OTLP sink, or ``None`` (embedded).
        resource: the logger's resource attributes (the run's identity), the spans' too.
    """
    section = config.tracing
    if not section.enabled:
        return False
    if tracing.is_configured():
        logger.info("perf_tracer is already configured: stats_logger.tracing left unused")
        return False
    output_dir = section.output_dir or config.run_dir / "traces"
    exporter = otlp.span_exporter() if otlp is not None else None
    tracing.configure(
        section,
        rank=_rank(process, rank),
        role=role,
        exporter=exporter,
        output_dir=output_dir,
        resource=resource,
        shared=True,
    )
    return True


def stop_tracing() -> None:
    """Write the sessions and export every span (before the OTLP sink closes)."""
    tracing.save(force=True)
    tracing.reset()
