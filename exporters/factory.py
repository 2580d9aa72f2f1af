"""Build the enabled sinks of a :class:`StatsLoggerConfig`, importing each one lazily.

A sink's module (and its optional library) is imported only when its section enables it,
so a missing ``wandb`` or ``swanlab`` fails only for the configuration that asks for it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

from exporters.base import Sink
from telemetry.config import StatsLoggerConfig

__all__ = ["build_sinks", "enabled_sinks"]


def enabled_sinks(config: StatsLoggerConfig) -> list[str]:
    """Names of the sinks ``config`` enables, in construction order."""
    names = []
    if config.console.enabled:
        names.append("console")
    if config.prometheus.enabled:
        names.append("prometheus")
    if config.wandb.mode != "disabled":
        names.append("wandb")
    if config.swanlab.mode != "disabled":
        names.append("swanlab")
    if config.tensorboard.path is not None:
        names.append("tensorboard")
    return names


def build_sinks(
    config: StatsLoggerConfig,
    *,
    run_name_suffix: str | None = None,
    swanlab_process: bool = False,
    experiment: Mapping[str, Any] | None = None,
) -> list[Sink]:
    """Construct every sink that ``config`` enables.

    Args:
        config: the validated stats_logger configuration.
        run_name_suffix: the W&B run id suffix (``<experiment>_<trial>_<suffix>``) that
            replaces ``wandb.id_suffix`` (a rollout or eval stream's own run); None keeps it.
        swanlab_process: run SwanLab in a child process of its own (a process that serves
            several runs, like the collector: SwanLab allows one run per process).
        experiment: the experiment config W&B and SwanLab log with the run, secrets
            removed (AReaL logs the whole experiment config); default: ``config``'s.

    Raises:
        ModuleNotFoundError: an enabled sink's library is not installed (the message names
            the ``pip install rltel[...]`` extra).
    """
    sinks: list[Sink] = []
    for name in enabled_sinks(config):
        if name == "console":
            sinks.append(_load("exporters.console", "ConsoleSink")(config.console))
        elif name == "prometheus":
            sinks.append(_load("exporters.prometheus", "PrometheusSink")(config.prometheus))
        elif name == "wandb":
            run_config = config
            if run_name_suffix is not None:
                wandb = dataclasses.replace(config.wandb, id_suffix=run_name_suffix)
                run_config = dataclasses.replace(config, wandb=wandb)
            sinks.append(_load("exporters.wandb", "WandbSink")(run_config, experiment))
        elif name == "swanlab":
            name = "SwanlabProcessSink" if swanlab_process else "SwanlabSink"
            sinks.append(_load("exporters.swanlab", name)(config, experiment))
        else:
            sinks.append(_load("exporters.tensorboard", "TensorBoardSink")(config))
    return sinks


def _load(module: str, cls: str) -> type[Sink]:
    return getattr(importlib.import_module(module), cls)
