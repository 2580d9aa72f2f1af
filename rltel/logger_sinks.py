"""The StatsLogger's sinks: built by the registry from its config, or given; their health
served on its Prometheus endpoint; a warning when none is on."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from exporters import prometheus
from exporters.factory import BuildContext
from exporters.fanout import FanOut
from telemetry.config import StatsLoggerConfig
from telemetry.model.run import run_name

__all__ = ["STREAMS", "build_context", "logger_sinks", "serve_sink_health", "warn_no_sink"]

logger = logging.getLogger("rltel.logger")

STREAMS = {"trainer": "train", "rollout": "rollout", "eval": "eval"}
"""The stream of each role's snapshots (and the W&B run id suffix of a worker's)."""


def logger_sinks(
    config: StatsLoggerConfig,
    given: Sequence[Any] | None,
    context: BuildContext,
) -> list[Any]:
    """The given sinks, or those the config enables; the OTLP sink whenever it is set; and
    the companions the config enables (``samples.jsonl``) beside embedded sinks, never alone."""
    from exporters.registry import build_sinks

    sinks = list(given or ())
    if given is None or config.otlp.endpoint:
        sinks += build_sinks(config, context, companions=False)
    if not sinks:
        return sinks
    return [*sinks, *build_sinks(config, context, companions=True)]  # none beside OTLP


def build_context(
    config: StatsLoggerConfig,
    experiment: Mapping[str, Any],
    role: str,
    worker: str,
    start_unix_nano: int,
    otlp_options: Mapping[str, Any] | None,
) -> BuildContext:
    """What a StatsLogger of ``role`` adds to its config to build its sinks."""
    return BuildContext(
        run_name_suffix=None if role == "trainer" else STREAMS[role],
        experiment=experiment,
        role=role,
        worker=worker,
        start_unix_nano=start_unix_nano,
        otlp_options=otlp_options,
    )


def serve_sink_health(fanout: FanOut, config: StatsLoggerConfig) -> None:
    """Serve every sink's queue counters on the in-process Prometheus endpoint, if any,
    as the collector serves them (the families the dashboards read)."""
    sink = fanout.built_by(prometheus.FACTORY)
    if sink is not None:
        run = run_name(config.experiment_name, config.trial_name)
        sink.register(prometheus.QueueMetrics(fanout, run))


def warn_no_sink(config: StatsLoggerConfig) -> None:
    """Warn that ``commit`` logs nothing, naming every key that turns a sink on."""
    from exporters.registry import switch_keys

    local = ", ".join(switch_keys(config, "stats_logger", remote=False))
    remote = " or ".join(switch_keys(config, "stats_logger", remote=True))
    logger.warning(
        "stats_logger: no sink is enabled, so commit() logs nothing; enable one of %s, or set %s",
        local,
        remote,
    )
