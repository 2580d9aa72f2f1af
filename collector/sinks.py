"""The collector's sinks from its ``sinks`` config: the shared ones every snapshot reaches
as it arrives, and the step-based ones each run gets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from collector.config import SinksConfig
from exporters.base import Sink
from exporters.prometheus import PrometheusSink

__all__ = ["RunSinks", "run_sink_factory", "shared_sinks"]

RunSinks = Callable[[str, str], Sequence[Sink]]
"""``(experiment, trial) -> step-based sinks`` of a run."""


def run_sink_factory(sinks: SinksConfig) -> RunSinks:
    """``(experiment, trial) -> step-based sinks`` from the collector's ``sinks`` section.

    Local directories get ``<experiment>/<trial>`` appended (TensorBoard ``path``, SwanLab
    ``logdir``), so runs never share files; W&B files go under ``fileroot`` as in the logger.
    """
    from exporters.registry import BuildContext, build_sinks

    def build(experiment: str, trial: str) -> list[Sink]:
        config = sinks.logger_config(experiment, trial)
        tensorboard, swanlab = config.tensorboard, config.swanlab
        if tensorboard.path is not None:
            path = str(Path(tensorboard.path) / experiment / trial)
            tensorboard = dataclasses.replace(tensorboard, path=path)
        if swanlab.logdir is not None:
            logdir = str(Path(swanlab.logdir) / experiment / trial)
            swanlab = dataclasses.replace(swanlab, logdir=logdir)
        prometheus = dataclasses.replace(config.prometheus, enabled=False)
        config = dataclasses.replace(
            config, tensorboard=tensorboard, swanlab=swanlab, prometheus=prometheus
        )
        return build_sinks(config, BuildContext(swanlab_process=True))

    return build


def shared_sinks(sinks: SinksConfig) -> list[Sink]:
    """The sinks every snapshot reaches as it arrives: Prometheus and remote write, if enabled.

    Raises:
        OSError: the Prometheus address cannot be bound.
    """
    shared: list[Sink] = []
    if sinks.prometheus.enabled:
        shared.append(PrometheusSink(sinks.prometheus))
    if sinks.remote_write.enabled:
        from exporters.remote_write import RemoteWriteSink

        shared.append(RemoteWriteSink(sinks.remote_write))
    return shared
