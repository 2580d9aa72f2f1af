"""The sink registry: every sink declares how its config enables it and how it is built.

Each sink package exposes a :class:`SinkFactory` as ``FACTORY``; :func:`build_sinks`
finds them through :data:`SINK_MODULES` (construction order) and builds the enabled ones.
A sink's package is imported only to ask it, and its optional library (``wandb``,
``swanlab``, ``tensorboard``) only when the sink is built, so a missing library fails only
for the configuration that enables it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporters.base import Sink
from telemetry.config import StatsLoggerConfig

__all__ = ["SINK_MODULES", "BuildContext", "SinkFactory", "build_sinks", "enabled_sinks"]

SINK_MODULES = (
    "exporters.console",
    "exporters.prometheus",
    "exporters.wandb",
    "exporters.swanlab",
    "exporters.tensorboard",
)


@dataclass(frozen=True)
class BuildContext:
    """What the process that builds the sinks adds to their config.

    Attributes:
        run_name_suffix: the W&B run id suffix (``<experiment>_<trial>_<suffix>``) that
            replaces ``wandb.id_suffix`` (a rollout or eval stream's own run); None keeps it.
        swanlab_process: run SwanLab in a child process of its own (a process that serves
            several runs, like the collector: SwanLab allows one run per process).
        experiment: the experiment config W&B and SwanLab log with the run, secrets
            removed (AReaL logs the whole experiment config); default: the config's own.
    """

    run_name_suffix: str | None = None
    swanlab_process: bool = False
    experiment: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SinkFactory:
    """A sink's entry in the registry: its name, when the config enables it, how to build it."""

    name: str
    enabled: Callable[[StatsLoggerConfig], bool]
    create: Callable[[StatsLoggerConfig, BuildContext], Sink]


def _factories() -> list[SinkFactory]:
    return [importlib.import_module(module).FACTORY for module in SINK_MODULES]


def enabled_sinks(config: StatsLoggerConfig) -> list[str]:
    """Names of the sinks ``config`` enables, in construction order."""
    return [factory.name for factory in _factories() if factory.enabled(config)]


def build_sinks(config: StatsLoggerConfig, context: BuildContext | None = None) -> list[Sink]:
    """Construct every sink that ``config`` enables.

    Raises:
        ModuleNotFoundError: an enabled sink's library is not installed (the message names
            the ``pip install rltel[...]`` extra).
    """
    context = context or BuildContext()
    return [f.create(config, context) for f in _factories() if f.enabled(config)]
