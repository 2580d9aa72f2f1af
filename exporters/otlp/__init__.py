"""OTLP delivery: the OTLP sink with its spool as overflow, the sender and the gRPC exporter.

The sink's modules (and grpc) are imported only when the sink is built.
"""

from __future__ import annotations

import logging
from pathlib import Path

from exporters.base import Sink
from exporters.factory import BuildContext, SinkFactory
from telemetry.config import StatsLoggerConfig

__all__ = ["FACTORY", "spool_root"]

logger = logging.getLogger(__name__)


def spool_root(config: StatsLoggerConfig) -> Path:
    """Where a run's OTLP senders spool: ``otlp.spool_dir``, else ``<run dir>/otlp-spool``."""
    spool_dir = config.otlp.spool_dir
    return Path(spool_dir) if spool_dir else config.run_dir / "otlp-spool"


def create(config: StatsLoggerConfig, context: BuildContext) -> Sink:
    """The OTLP sink of one sender, its spool under ``otlp.spool_dir`` or the run directory.

    A trainer's spool is ``trainer/`` (``trainer-<rank>/`` on a rank other than 0, which sends
    only spans), a rollout or eval worker's ``<role>-<worker>/``.
    """
    from exporters.otlp.fork_safety import keep_forked_children_safe

    keep_forked_children_safe()  # before gRPC loads (docs/troubleshooting.md)
    from exporters.otlp.sink import OtlpSink
    from exporters.otlp.spool import Spool

    otlp = config.otlp
    role = context.role
    name = role if role == "trainer" and context.worker == "0" else f"{role}-{context.worker}"
    directory = spool_root(config)
    try:
        spool = Spool(directory / name, otlp.spool_limit_bytes)
    except OSError as exc:
        logger.warning(
            "otlp: no spool at %s (%s); outages beyond the queue lose data", directory, exc
        )
        spool = None
    if spool is not None and len(spool):
        from exporters.otlp.overflow import ranges

        steps = spool.steps()
        held = f"; steps {ranges(steps)}" if steps else ""
        logger.warning(
            "otlp: %d requests (%d points%s) that an earlier process left in %s are sent "
            "first; if this process ends before they are, send them with: "
            "rltel spool flush %s --endpoint %s",
            len(spool),
            spool.points,
            held,
            spool.directory,
            spool.directory,
            otlp.endpoint,
        )
    return OtlpSink(
        otlp.endpoint,
        insecure=otlp.insecure,
        tls=otlp.tls if otlp.tls is not None and otlp.tls.enabled else None,
        headers=otlp.plain_headers(),
        timeout_s=otlp.timeout,
        queue_size=otlp.queue_size,
        max_points_per_request=otlp.max_points_per_request,
        spool=spool,
        cumulative=role != "trainer",
        start_unix_nano=context.start_unix_nano,
        **dict(context.otlp_options or {}),
    )


FACTORY = SinkFactory(
    "otlp", "endpoint", enabled=lambda section: bool(section.endpoint), create=create, remote=True
)
